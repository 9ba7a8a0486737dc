package softroce

import (
	"fmt"

	"github.com/rsock-go/rsock/verbs"
)

// sendWQE is a posted send work request and its transmission progress.
type sendWQE struct {
	id         uint64
	opcode     verbs.WROpcode
	flags      verbs.SendFlags
	imm        uint32
	raddr      uint64
	rkey       uint32
	compareAdd uint64
	swap       uint64
	sgl        []verbs.SGE // backed by QP.sgeStore
	inline     []byte      // backed by QP.inlineStore; used when flags has SendInline
	length     uint64

	started  bool   // PSNs assigned
	firstPSN uint32 // PSN of the first packet (of the first response for READ)
	npkts    uint32 // PSNs the request consumes
	readPkts uint32 // READ response packets received in order
	readReq  uint32 // READ response packets asked for so far (readReq ≥ readPkts)
	// readAsked is where the last READ request asked from: that request's
	// PSN is first+readAsked, the only PSN of the part the requester sent.
	readAsked uint32
	readHigh  uint32 // the most READ response packets ever asked for
	done      bool   // READ or atomic has all its response
}

func (w *sendWQE) lastPSN() uint32 { return psnAdd(w.firstPSN, w.npkts-1) }

// isRdAtomic reports whether the request is answered with data (READ, atomics).
func (w *sendWQE) isRdAtomic() bool {
	return w.opcode == verbs.WRRDMARead || w.opcode == verbs.WRAtomicCmpAndSwp || w.opcode == verbs.WRAtomicFetchAdd
}

// containsPSN reports whether psn falls within the request's PSNs.
func (w *sendWQE) containsPSN(psn uint32) bool {
	return w.started && psnDiff(psn, w.firstPSN) >= 0 && psnDiff(psn, w.lastPSN()) <= 0
}

// recvWQE is a posted receive work request.
type recvWQE struct {
	id  uint64
	sgl []verbs.SGE // backed by QP.rqSGEStore
}

// PostSend queues send work requests.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	switch q.attr.State {
	case verbs.QPSRTS, verbs.QPSErr:
	default:
		return 0, fmt.Errorf("softroce: post send in %v: %w", q.attr.State, verbs.ErrInvalidState)
	}
	for i := range wrs {
		if q.sqTail-q.sqHead == uint32(len(q.sq)) {
			q.runRequester()
			return i, verbs.ErrQueueFull
		}
		if err := q.enqueueSend(&wrs[i]); err != nil {
			q.runRequester()
			return i, err
		}
	}
	if q.attr.State == verbs.QPSErr {
		q.flush(q.sqTail, 0)
		return len(wrs), nil
	}
	q.runRequester()
	return len(wrs), nil
}

// enqueueSend validates wr and copies it into the send queue.
func (q *QP) enqueueSend(wr *verbs.SendWR) error {
	length, err := verbs.CheckSendWR(wr, q.cap.MaxSendSGE)
	if err != nil {
		return fmt.Errorf("softroce: %w", err)
	}
	inline := wr.Flags&verbs.SendInline != 0
	if inline && length > uint64(q.cap.MaxInlineData) {
		return fmt.Errorf("softroce: inline %v of %d bytes (max %d): %w", wr.Opcode, length, q.cap.MaxInlineData, verbs.ErrInvalidArgument)
	}
	w := &q.sq[q.sqTail%uint32(len(q.sq))]
	*w = sendWQE{
		id:         wr.ID,
		opcode:     wr.Opcode,
		flags:      wr.Flags,
		imm:        wr.Imm,
		raddr:      wr.RemoteAddr,
		rkey:       wr.RKey,
		compareAdd: wr.CompareAdd,
		swap:       wr.Swap,
		sgl:        append(w.sgl[:0], wr.SGL...),
		inline:     w.inline[:0],
		length:     length,
	}
	if q.sigAll {
		w.flags |= verbs.SendSignaled
	}
	if inline {
		// Inline data is copied now, so the caller may reuse its buffer
		// as soon as PostSend returns.
		w.inline = w.inline[:length]
		if !q.dev.gather(q.pd, w.sgl, 0, w.inline) {
			return fmt.Errorf("softroce: inline data outside registered memory of the PD: %w", verbs.ErrInvalidArgument)
		}
	}
	q.sqTail++
	return nil
}

// PostRecv queues receive work requests.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	if q.attr.State == verbs.QPSReset {
		return 0, fmt.Errorf("softroce: post recv in RESET: %w", verbs.ErrInvalidState)
	}
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGL)) > q.cap.MaxRecvSGE {
			return i, fmt.Errorf("softroce: %d SGEs, QP allows %d: %w", len(wr.SGL), q.cap.MaxRecvSGE, verbs.ErrInvalidArgument)
		}
		if q.rqTail-q.rqHead == uint32(len(q.rq)) || q.cap.MaxRecvWR == 0 {
			return i, verbs.ErrQueueFull
		}
		w := &q.rq[q.rqTail%uint32(len(q.rq))]
		w.id = wr.ID
		w.sgl = append(w.sgl[:0], wr.SGL...)
		q.rqTail++
	}
	if q.attr.State == verbs.QPSErr {
		q.flush(q.sqHead, 0)
	}
	return len(wrs), nil
}
