package rsock

import (
	"fmt"
	"net"
	"os"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// drive handles the completions waiting in the stream's queue: data
// arrivals, control messages, and the completions of its own writes; then
// it returns credits if they are due. There is no goroutine per stream:
// whoever needs progress (a Read, a Write, Close, the keep-alive timer)
// drives, and a waiter woken by the queue's notification wakes the others
// through their ready channels. The caller holds s.mu.
func (s *Stream) drive() {
	for {
		n, err := s.e.cq.Poll(s.wcs)
		if err != nil {
			s.fail(fmt.Errorf("rsock: completion queue: %w", err))
			return
		}
		for i := range s.wcs[:n] {
			s.complete(&s.wcs[i])
		}
		if n < len(s.wcs) {
			break
		}
	}
	if s.cons.ShouldReport() {
		s.sendControl(ctrlCredit)
	}
}

// complete handles one completion. The caller holds s.mu.
func (s *Stream) complete(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		if wc.Status != verbs.WCWRFlushErr || s.err == nil {
			s.fail(fmt.Errorf("rsock: %v %v: %w", wc.Opcode, wc.Status, errConnLost))
		}
		return
	}
	switch wc.Opcode {
	case verbs.WCRecvRDMAWithImm:
		if wc.Imm>>immTypeShift != immData || !s.cons.Arrived(int(wc.Imm&immValueMask)) {
			s.fail(ErrProtocol)
			return
		}
		s.repost(int(wc.WRID))
		signal(s.readReady)
	case verbs.WCRecv:
		typ, consumed, processed, ok := parseControl(s.e.ctrlSlot(int(wc.WRID))[:wc.ByteLen])
		if !ok || !s.prod.Update(consumed, processed) {
			s.fail(ErrProtocol)
			return
		}
		switch typ {
		case ctrlFIN:
			s.rfin = true
		case ctrlClose:
			s.rfin, s.peerClosed = true, true
		}
		s.repost(int(wc.WRID))
		signal(s.readReady)
		signal(s.writeReady)
	case verbs.WCRDMAWrite:
		s.sendFreed = wc.WRID
		signal(s.writeReady)
	case verbs.WCSend:
		s.ctrlInUse--
		signal(s.writeReady)
	}
}

// errConnLost is the cause when the transport gives up on the peer.
var errConnLost = fmt.Errorf("rsock: connection lost")

// repost gives receive slot i back to the queue and counts the message
// processed. The caller holds s.mu.
func (s *Stream) repost(i int) {
	s.cons.Processed()
	s.recvSGE[0] = s.e.ctrlSGE(i)
	s.recvWR[0] = verbs.RecvWR{ID: uint64(i), SGL: s.recvSGE[:]}
	if _, err := s.e.qp.PostRecv(s.recvWR[:]); err != nil {
		s.fail(err)
	}
}

// onKeepAlive sends a KEEPALIVE when nothing was sent for the interval,
// so that the transport notices a peer that vanished.
func (s *Stream) onKeepAlive() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.err != nil {
		return
	}
	s.drive()
	every := s.e.cfg.KeepAlive
	if idle := time.Since(s.lastSend); idle >= every {
		s.sendControl(ctrlKeepAlive)
	} else {
		every -= idle
	}
	s.keepalive.Reset(every)
}

// CloseWrite sends FIN after the data written so far: the peer reads it
// all, then io.EOF. Reading continues to work.
func (s *Stream) CloseWrite() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		switch {
		case s.closed:
			return s.opError("close", net.ErrClosed)
		case s.wclosed:
			return nil
		case s.err != nil:
			return s.opError("close", s.err)
		}
		s.drive()
		if s.sendControl(ctrlFIN) {
			s.wclosed = true
			return nil
		}
		s.mu.Unlock()
		select {
		case <-s.e.cq.Notify():
		case <-s.writeReady:
		case <-s.wdl.wait():
			s.mu.Lock()
			return s.opError("close", os.ErrDeadlineExceeded)
		}
		s.mu.Lock()
	}
}

// Close sends CLOSE, waits up to Config.CloseTimeout for the data written
// to be acknowledged, then destroys the queue pair and frees the rings.
// Pending reads and writes return net.ErrClosed. It is idempotent.
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
	sentClose := false
	for s.drive(); s.err == nil && !s.peerClosed && (!sentClose || s.sendFreed != s.sendHead || s.ctrlInUse > 0) && time.Now().Before(deadline); s.drive() {
		if !sentClose && s.sendControl(ctrlClose) {
			sentClose = true
			continue
		}
		s.mu.Unlock()
		select {
		case <-s.e.cq.Notify():
		case <-s.writeReady:
		case <-time.After(time.Until(deadline)):
		}
		s.mu.Lock()
	}
	s.closed = true
	signal(s.readReady)
	signal(s.writeReady)
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
	s.e.release()
	s.wmu.Unlock()
	s.rmu.Unlock()
}

// SetDeadline sets the read and write deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	s.rdl.set(t)
	s.wdl.set(t)
	return nil
}

// SetReadDeadline sets the read deadline; a Read waiting past it returns
// os.ErrDeadlineExceeded.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the write deadline.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.wdl.set(t)
	return nil
}
