package rsock

import (
	"fmt"
	"syscall"
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
		s.postReceives()
		if n < len(s.wcs) {
			break
		}
	}
	if s.sendErr != nil {
		if !s.peerClosed {
			s.fail(s.sendErr)
		}
		s.sendErr = nil
	}
	if s.cons.ShouldReport() {
		s.sendControl(ctrlCredit)
	}
}

// complete handles one completion. The caller holds s.mu.
func (s *Stream) complete(wc *verbs.WC) {
	if wc.Status != verbs.WCSuccess {
		if wc.Status == verbs.WCWRFlushErr && s.peerClosed && !isSendOpcode(wc.Opcode) {
			// The peer closed in order and then destroyed its queue pair
			// (shm fails ours then): its data stays readable up to
			// io.EOF, and writes fail with ErrPeerClosed.
			return
		}
		if wc.Status != verbs.WCWRFlushErr || s.err == nil {
			err := fmt.Errorf("rsock: %v %v: %w", wc.Opcode, wc.Status, errConnLost)
			if c, ok := s.e.qp.(verbs.Causer); ok {
				if cause := c.Cause(); cause != nil {
					err = fmt.Errorf("rsock: %v %v: %w: %w", wc.Opcode, wc.Status, cause, errConnLost)
				}
			}
			if isSendOpcode(wc.Opcode) && s.err == nil {
				// Decided at the end of drive: see sendErr.
				if s.sendErr == nil {
					s.sendErr = err
				}
			} else {
				s.fail(err)
			}
		}
		return
	}
	switch wc.Opcode {
	case verbs.WCRecvRDMAWithImm:
		// Every data write carries its message's last byte: a zero-length
		// one (which needs no rkey to be accepted) did not come from the
		// peer's stream, and the bytes it announces are not in the ring.
		if wc.Imm>>immTypeShift != immData || wc.ByteLen == 0 || !s.cons.Arrived(int(wc.Imm&immValueMask)) {
			s.fail(ErrProtocol)
			return
		}
		s.repost(int(wc.WRID))
		s.signalRead()
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
		s.signalRead()
		s.signalWrite()
	case verbs.WCRDMAWrite:
		s.sendFreed = wc.WRID
		s.signalWrite()
	case verbs.WCSend:
		s.ctrlInUse--
		s.signalWrite()
	}
}

// errConnLost is the cause when the transport gives up on the peer. It
// wraps ECONNRESET, as package net reports a connection the network lost.
var errConnLost = fmt.Errorf("rsock: connection lost: %w", syscall.ECONNRESET)

// repost queues receive slot i to go back to the receive queue with the
// rest of its batch of completions (postReceives). The caller holds s.mu.
func (s *Stream) repost(i int) {
	s.e.reposts = append(s.e.reposts, s.e.recvWR(i))
}

// postReceives gives the receive slots freed by a batch of completions
// back to the queue with one PostRecv (one cgo call on rdma-core, not one
// per message), and only then counts their messages processed: credits
// the peer sees never name a receive request not yet posted. s.mu is
// released during the post, as for sends (post); a drive meanwhile
// collects its slots in the other buffer, and this loop posts them too.
// Close waits for the post through s.posting. The caller holds s.mu.
func (s *Stream) postReceives() {
	e := s.e
	for !e.reposting && len(e.reposts) > 0 && !s.closed && s.err == nil {
		wrs := e.reposts
		e.reposts, e.spare = e.spare[:0], wrs
		e.reposting = true
		s.posting++
		s.mu.Unlock()
		posted, err := e.qp.PostRecv(wrs)
		s.mu.Lock()
		s.posting--
		e.reposting = false
		s.postDone.Broadcast() // Close, once closed, waits for posts to end
		for range posted {
			s.cons.Processed()
		}
		if err != nil && !s.closed {
			s.fail(err)
		}
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

// isSendOpcode reports whether op completes one of our own sends rather
// than a receive.
func isSendOpcode(op verbs.WCOpcode) bool {
	switch op {
	case verbs.WCSend, verbs.WCRDMAWrite, verbs.WCRDMARead:
		return true
	}
	return false
}
