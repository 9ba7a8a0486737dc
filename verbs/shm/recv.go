//go:build linux

package shm

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// arrivals reports whether the inbound ring holds an entry a posted
// receive can take (a cheap look for Wait; Poll checks it all).
func (q *QP) arrivals() bool {
	return u64(q.slot, offProd).Load() != q.consA.Load() && q.posted.Load() > 0 || q.leaving()
}

// published is the peer's producer count, for change detection only.
func (q *QP) published() uint64 { return u64(q.slot, offProd).Load() }

// harvest turns the entries the peer published into receive completions,
// as far as receives are posted and the CQ has room. Every entry is read
// once into private memory and checked; a bad one fails the channel.
func (q *QP) harvest() {
	if q.gone.Load() {
		return
	}
	if u64(q.slot, offProd).Load() == q.consA.Load() {
		q.leaveIfDrained()
		return
	}
	q.rqMu.Lock()
	consumed, viol, failed := q.harvestLocked()
	q.rqMu.Unlock()
	if viol != nil {
		q.dev.fail(viol, false)
		return
	}
	if failed != nil {
		q.setCause(failed)
		q.sqMu.Lock()
		q.toErr(nil, 0)
		q.sqMu.Unlock()
	}
	if consumed {
		q.wakePeerSender()
	}
	q.leaveIfDrained()
}

// harvestHeld is harvest for a caller that holds sqMu and is about to
// fail the QP: what the peer published is delivered first. It returns a
// violation by the peer, for the caller to fail the channel with once it
// released its locks.
func (q *QP) harvestHeld() error {
	q.rqMu.Lock()
	_, viol, failed := q.harvestLocked()
	q.rqMu.Unlock()
	if failed != nil {
		q.setCause(failed)
	}
	return viol
}

// harvestLocked does harvest's work. The caller holds rqMu.
func (q *QP) harvestLocked() (consumed bool, viol, failed error) {
	st := q.State()
	if st == verbs.QPSReset || st == verbs.QPSInit {
		return false, nil, nil
	}
	prod := u64(q.slot, offProd).Load()
	if prod-q.cons > ringEntries {
		return false, fmt.Errorf("%w: queue pair %#x: %d entries published, %d consumed", ErrViolation, q.qpn, prod, q.cons), nil
	}
	room := q.recvCQ.room()
	for q.cons != prod && q.rqHead != q.rqTail && room > 0 && failed == nil {
		e := readEntry(q.slot, q.cons)
		w := &q.rq[q.rqHead%uint32(len(q.rq))]
		wc := verbs.WC{WRID: w.id, QPN: q.qpn, ByteLen: e.len}
		switch {
		case e.op == entSend || e.op == entSendImm:
			wc.Opcode = verbs.WCRecv
			if e.op == entSendImm {
				wc.Flags, wc.Imm = verbs.WCWithImm, e.imm
			}
			var err error
			if e.flags == entFlagOOL {
				err = q.takeOOL(e.len, w, &wc)
			} else if e.flags != 0 || e.len > inlineMax {
				err = fmt.Errorf("%w: queue pair %#x: inline SEND of %d bytes (flags %#x)", ErrViolation, q.qpn, e.len, e.flags)
			} else {
				if uint64(e.len) <= w.total && !w.bad {
					ringCopyOut(q.slot, q.dataTail, int(e.len), w.bufs)
				}
				q.dataTail += uint64(e.len)
			}
			if err != nil {
				return consumed, err, nil
			}
		case e.op == entWriteImm && e.flags == 0 && e.len <= 1<<31:
			wc.Opcode = verbs.WCRecvRDMAWithImm
			wc.Flags, wc.Imm = verbs.WCWithImm, e.imm
		default:
			return consumed, fmt.Errorf("%w: queue pair %#x: entry op %d flags %#x length %d", ErrViolation, q.qpn, e.op, e.flags, e.len), nil
		}
		switch {
		case w.bad:
			wc.Status = verbs.WCLocProtErr
			failed = fmt.Errorf("shm: receive %d names memory outside the PD's regions", w.id)
		case wc.Opcode == verbs.WCRecv && uint64(e.len) > w.total:
			wc.Status = verbs.WCLocLenErr
			failed = fmt.Errorf("shm: a SEND of %d bytes for a receive of %d", e.len, w.total)
		}
		q.rqHead++
		q.posted.Add(-1)
		q.cons++
		q.recvCQ.push(&wc)
		room--
		consumed = true
	}
	if consumed {
		q.consA.Store(q.cons)
		u64(q.slot, offConsData).Store(q.dataTail)
		u64(q.slot, offCons).Store(q.cons)
	}
	return consumed, nil, failed
}

// takeOOL reads a large SEND from the memfd that came ahead of its entry.
// The caller holds rqMu.
func (q *QP) takeOOL(n uint32, w *recvWQE, wc *verbs.WC) error {
	m, ok := q.popOOL()
	if !ok {
		if err := q.dev.sync(); err != nil {
			return err
		}
		if m, ok = q.popOOL(); !ok {
			return fmt.Errorf("%w: queue pair %#x: out-of-line SEND without its memfd", ErrViolation, q.qpn)
		}
	}
	defer unix.Close(m.fd)
	if m.n != n {
		return fmt.Errorf("%w: queue pair %#x: out-of-line SEND of %d bytes, entry says %d", ErrViolation, q.qpn, m.n, n)
	}
	if uint64(n) > w.total || w.bad {
		return nil // the caller completes it with an error
	}
	iov := make([][]byte, 0, len(w.bufs))
	left := int(n)
	for _, b := range w.bufs {
		if left == 0 {
			break
		}
		k := min(left, len(b))
		iov = append(iov, b[:k])
		left -= k
	}
	got := 0
	for got < int(n) {
		k, err := unix.Preadv(m.fd, iov, int64(got))
		if err != nil || k == 0 {
			return fmt.Errorf("%w: queue pair %#x: out-of-line SEND: read %d of %d bytes: %v", ErrViolation, q.qpn, got, n, err)
		}
		got += k
		for k > 0 {
			if k >= len(iov[0]) {
				k -= len(iov[0])
				iov = iov[1:]
			} else {
				iov[0] = iov[0][k:]
				k = 0
			}
		}
	}
	return nil
}

func (q *QP) popOOL() (oolMsg, bool) {
	q.oolMu.Lock()
	defer q.oolMu.Unlock()
	if len(q.ool) == 0 {
		return oolMsg{}, false
	}
	m := q.ool[0]
	q.ool = q.ool[1:]
	return m, true
}

// wakePeerSender wakes the peer QP's send CQ when the peer waits for room
// in our ring (or for us to be ready) and sleeps.
func (q *QP) wakePeerSender() {
	p := q.dest.Load()
	if p == nil {
		return
	}
	if u32(p.slot, offTxBlocked).Load() != 0 && p.sendCQ.flag.Load() != 0 {
		p.sendCQ.wake(q.dev)
	}
}
