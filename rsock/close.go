package rsock

import (
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// CloseWrite sends FIN after the data written so far: the peer reads it
// all, then io.EOF. Reading continues to work.
func (s *Stream) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		seen := s.kicks()
		if !s.closed {
			s.drive()
		}
		switch {
		case s.closed:
			return s.opError("close", net.ErrClosed)
		case s.wclosed:
			return nil
		case s.err != nil:
			return s.opError("close", s.err)
		case s.peerClosed:
			// Nobody reads a FIN any more; shutting down succeeds, as
			// shutdown(2) does after the peer closed.
			s.wclosed = true
			return nil
		}
		if s.sendControl(ctrlFIN) {
			s.wclosed = true
			return nil
		}
		s.mu.Unlock()
		if err := s.await(s.writeReady, s.wdl.wait(), s.wdl.when(), seen); err != nil {
			s.mu.Lock()
			return s.opError("close", err)
		}
		s.mu.Lock()
	}
}

// Close sends CLOSE, waits up to Config.CloseTimeout for the data written
// to be acknowledged, then destroys the queue pair and frees the rings.
// Pending reads and writes return net.ErrClosed. It reports, as a
// *net.OpError, data of a healthy stream still unacknowledged at the
// timeout (wrapping os.ErrDeadlineExceeded) and failures to release the
// queue pair and memory; every later call returns the same. A stream that
// had already failed closes without error: its reads and writes reported
// the failure.
func (s *Stream) Close() error {
	s.closeOnce.Do(s.teardown)
	return s.teardownErr
}

func (s *Stream) teardown() {
	s.mu.Lock()
	deadline := time.Now().Add(s.e.cfg.CloseTimeout)
	// CLOSE needs a receive request at the peer and a control slot; wait
	// for them as for the acknowledgements, within the same bound.
	// When the peer closed first, nothing is owed to it.
	expire := newDeadline()
	expire.set(deadline)
	defer expire.stop()
	seen := s.kicks()
	for s.drive(); s.closeOwed() && time.Now().Before(deadline); s.drive() {
		// A data write being posted goes first: CLOSE must follow it.
		if !s.closeSent && s.posting == 0 && s.sendControl(ctrlClose) {
			continue
		}
		s.mu.Unlock()
		s.await(s.writeReady, expire.wait(), deadline, seen)
		s.mu.Lock()
		seen = s.kicks()
	}
	var errs []error
	if s.closeOwed() {
		errs = append(errs, fmt.Errorf("rsock: %d bytes and %d control messages unacknowledged after %v: %w",
			s.sendHead-s.sendFreed, s.ctrlInUse+boolInt(!s.closeSent), s.e.cfg.CloseTimeout, os.ErrDeadlineExceeded))
	}
	s.closed = true
	s.signalRead()
	s.signalWrite()
	// No post starts once closed is set; those in progress (a keep-alive,
	// credits from a drive outside Read) end before the rings go.
	for s.posting > 0 {
		s.postDone.Wait()
	}
	s.mu.Unlock()
	// Readers and writers see closed and leave; wait for them before the
	// memory goes away.
	s.rmu.Lock()
	s.wmu.Lock()
	if s.keepalive != nil {
		s.keepalive.Stop()
	}
	s.rdl.stop()
	s.wdl.stop()
	errs = append(errs, s.e.release())
	s.wmu.Unlock()
	s.rmu.Unlock()
	if err := errors.Join(errs...); err != nil {
		s.teardownErr = s.opError("close", err)
	}
}

// closeOwed reports whether Close still owes the peer something: CLOSE,
// or the acknowledgement of data or of a control message sent before it.
// Nothing is owed to a peer that closed first, or once the stream failed.
// The caller holds s.mu.
func (s *Stream) closeOwed() bool {
	return s.err == nil && !s.peerClosed && (!s.closeSent || s.sendFreed != s.sendHead || s.ctrlInUse > 0)
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
