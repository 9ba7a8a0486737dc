//go:build linux

package shm

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// Outcomes of carrying out a send request.
const (
	sendDone    = iota // completed (successfully or with an error status)
	sendBlocked        // the peer's ring has no room (or its QP is not ready): wait
	sendSync           // something the peer announced is not known yet: read the channel
)

// PostSend carries out send work requests in order, during the call: a
// WRITE is a copy into the peer's mapped region, a SEND a copy into the
// peer QP's inbound ring. Requests that find no room wait in the send
// queue; ErrQueueFull when it holds MaxSendWR of them.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	q.sqMu.Lock()
	switch st := q.State(); st {
	case verbs.QPSRTS, verbs.QPSErr, verbs.QPSSQD:
	default:
		q.sqMu.Unlock()
		if q.isClosed() {
			return 0, verbs.ErrClosed
		}
		return 0, fmt.Errorf("shm: post send in %v: %w", st, verbs.ErrInvalidState)
	}
	var viol error
	var wake *peerQP
	for i := range wrs {
		wr := &wrs[i]
		if err := q.validate(wr); err != nil {
			q.sqMu.Unlock()
			q.finish(wake, viol)
			return i, err
		}
		if q.State() == verbs.QPSErr {
			q.sendCQ.push(&verbs.WC{WRID: wr.ID, Status: verbs.WCWRFlushErr, Opcode: wcOpcode(wr.Opcode), QPN: q.qpn})
			continue
		}
		if len(q.pending) > 0 {
			q.runPending(&wake, &viol)
		}
		if len(q.pending) == 0 && viol == nil {
			r, p, err := q.run(wr, nil)
			if p != nil {
				wake = p
			}
			if err != nil {
				viol = err
			}
			if r != sendBlocked {
				continue
			}
		}
		if len(q.pending) >= int(q.cap.MaxSendWR) {
			q.sqMu.Unlock()
			q.finish(wake, viol)
			return i, verbs.ErrQueueFull
		}
		q.enqueue(wr)
	}
	q.sqMu.Unlock()
	q.finish(wake, viol)
	return len(wrs), nil
}

// run carries out one request, reading the channel once if it names
// something the peer announced that is not known yet. The caller holds
// sqMu.
func (q *QP) run(wr *verbs.SendWR, data [][]byte) (int, *peerQP, error) {
	r, p, err := q.execute(wr, data, false)
	if r == sendSync && err == nil {
		if err := q.dev.sync(); err != nil {
			return sendDone, nil, err
		}
		r, p, err = q.execute(wr, data, true)
	}
	return r, p, err
}

// PostWriteInline carries out an RDMA WRITE or WRITE_WITH_IMM (wr's
// opcode, remote address, key, immediate, ID and flags; its SGL is
// ignored) whose payload is data in ordinary memory: the bytes are copied
// straight into the peer's region during the call, so no lkey is needed
// and data is free once it returns (verbs.InlineWriter). A request that
// must wait for room in the peer's ring keeps a copy.
func (q *QP) PostWriteInline(wr *verbs.SendWR, data []byte) error {
	if wr.Opcode != verbs.WRRDMAWrite && wr.Opcode != verbs.WRRDMAWriteWithImm || len(data) > 1<<31 {
		return fmt.Errorf("shm: inline %v of %d bytes: %w", wr.Opcode, len(data), verbs.ErrInvalidArgument)
	}
	q.sqMu.Lock()
	switch st := q.State(); st {
	case verbs.QPSRTS, verbs.QPSSQD:
	case verbs.QPSErr:
		q.sendCQ.push(&verbs.WC{WRID: wr.ID, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRDMAWrite, QPN: q.qpn})
		q.sqMu.Unlock()
		return nil
	default:
		q.sqMu.Unlock()
		if q.isClosed() {
			return verbs.ErrClosed
		}
		return fmt.Errorf("shm: post send in %v: %w", st, verbs.ErrInvalidState)
	}
	var viol error
	var wake *peerQP
	if len(q.pending) > 0 {
		q.runPending(&wake, &viol)
	}
	w := *wr
	w.Flags |= verbs.SendInline
	w.SGL = nil
	if len(q.pending) == 0 && viol == nil {
		q.one[0] = data
		r, p, err := q.run(&w, q.one[:])
		q.one[0] = nil
		if p != nil {
			wake = p
		}
		if r != sendBlocked || err != nil {
			q.sqMu.Unlock()
			q.finish(wake, err)
			return nil
		}
	}
	if len(q.pending) >= int(q.cap.MaxSendWR) {
		q.sqMu.Unlock()
		q.finish(wake, viol)
		return verbs.ErrQueueFull
	}
	q.pending = append(q.pending, sendWQE{wr: w})
	pw := &q.pending[len(q.pending)-1]
	pw.inline = append(pw.inline[:0], data...)
	if pw.inline == nil {
		pw.inline = []byte{}
	}
	q.npending.Store(int32(len(q.pending)))
	q.sqMu.Unlock()
	q.finish(wake, viol)
	return nil
}

// finish wakes the peer's receive CQ if it sleeps and handles a
// violation, after the send lock is released.
func (q *QP) finish(wake *peerQP, viol error) {
	if viol != nil {
		q.dev.fail(viol, false)
	}
	if wake != nil && wake.recvCQ.flag.Load() != 0 {
		wake.recvCQ.wake(q.dev)
	}
}

// validate checks a request before it is queued or carried out.
func (q *QP) validate(wr *verbs.SendWR) error {
	if _, err := verbs.CheckSendWR(wr, q.cap.MaxSendSGE); err != nil {
		return fmt.Errorf("shm: %w", err)
	}
	return nil
}

// enqueue copies wr into the send queue; inline data is copied now, so
// the caller's buffer is free when PostSend returns. The caller holds sqMu.
func (q *QP) enqueue(wr *verbs.SendWR) {
	q.pending = append(q.pending, sendWQE{})
	w := &q.pending[len(q.pending)-1]
	w.wr = *wr
	w.sgl = append(w.sgl[:0], wr.SGL...)
	w.wr.SGL = w.sgl
	if wr.Flags&verbs.SendInline != 0 {
		if srcs, ok := q.gather(wr, false); ok {
			for _, s := range srcs {
				w.inline = append(w.inline, s...)
			}
		} else {
			w.inline = nil // carried out later, it fails its key check
		}
	}
	q.npending.Store(int32(len(q.pending)))
}

// progress moves waiting sends on; the send CQ calls it when polled.
func (q *QP) progress() {
	if q.npending.Load() == 0 || q.gone.Load() {
		return
	}
	var viol error
	var wake *peerQP
	q.sqMu.Lock()
	q.runPending(&wake, &viol)
	q.sqMu.Unlock()
	q.finish(wake, viol)
}

// runPending carries out waiting sends while there is room. The caller
// holds sqMu.
func (q *QP) runPending(wake **peerQP, viol *error) {
	done := 0
	for done < len(q.pending) && q.State() != verbs.QPSErr {
		w := &q.pending[done]
		var data [][]byte
		if w.wr.Flags&verbs.SendInline != 0 && w.inline != nil {
			q.one[0] = w.inline
			data = q.one[:]
		}
		r, p, err := q.run(&w.wr, data)
		if p != nil {
			*wake = p
		}
		if err != nil {
			*viol = err
			return
		}
		if r != sendDone {
			break
		}
		done++
	}
	if q.State() == verbs.QPSErr {
		return // toErr flushed the queue
	}
	n := copy(q.pending, q.pending[done:])
	for i := n; i < len(q.pending); i++ {
		q.pending[i] = sendWQE{}
	}
	q.pending = q.pending[:n]
	q.npending.Store(int32(n))
	if n == 0 && q.blocked {
		q.blocked = false
		u32(q.slot, offTxBlocked).Store(0)
	}
}

// gather resolves the request's local SGEs to memory, and checks local
// write access for READs and atomics. The caller holds sqMu.
func (q *QP) gather(wr *verbs.SendWR, write bool) ([][]byte, bool) {
	q.srcs = q.srcs[:0]
	for _, s := range wr.SGL {
		if s.Length == 0 {
			continue
		}
		m := q.dev.lookupMR(s.LKey)
		if (m == nil || m.pd != q.pd) && wr.Flags&verbs.SendInline != 0 {
			m = q.dev.lookupAddr(q.pd, s.Addr, s.Length)
		}
		if m == nil || m.pd != q.pd || write && !m.access.Has(verbs.AccessLocalWrite) {
			return nil, false
		}
		b, ok := m.slice(s.Addr, s.Length)
		if !ok {
			return nil, false
		}
		q.srcs = append(q.srcs, b)
	}
	return q.srcs, true
}

// room says whether the peer's ring has an entry, and n bytes in its data
// area, free. It reads the peer's cursors once: each must lie between
// what it said before and what we produced, or the peer is lying.
func (q *QP) room(p *peerQP, n int) (bool, error) {
	cons := u64(p.slot, offCons).Load()
	if cons-q.peerCons > q.prod-q.peerCons {
		return false, fmt.Errorf("%w: queue pair %#x says it consumed %d entries (before %d, produced %d)", ErrViolation, p.qpn, cons, q.peerCons, q.prod)
	}
	q.peerCons = cons
	if q.prod-cons == ringEntries {
		return false, nil
	}
	if n == 0 {
		return true, nil
	}
	consData := u64(p.slot, offConsData).Load()
	if consData-q.peerData > q.dataHead-q.peerData {
		return false, fmt.Errorf("%w: queue pair %#x says it consumed %d data bytes (before %d, produced %d)", ErrViolation, p.qpn, consData, q.peerData, q.dataHead)
	}
	q.peerData = consData
	return n <= int(dataSize-(q.dataHead-consData)), nil
}

// watchReady starts, once, a goroutine that moves the waiting sends on
// once the peer's queue pair is ready. The peer's Modify rings our send
// CQ only when this process sleeps on it, and a process may post a send
// and then wait elsewhere: rsock's first Write after a handshake whose
// other end has not connected its queue pair yet, then a wait on another
// connection. The goroutine lives only for that window: it ends once the
// peer is ready (or gone), or this queue pair closed or failed. The
// caller holds sqMu.
func (q *QP) watchReady() {
	if q.watching {
		return
	}
	q.watching = true
	go func() {
		pause := 20 * time.Microsecond
		for {
			time.Sleep(pause)
			pause = min(2*pause, time.Millisecond)
			if q.gone.Load() || q.State() == verbs.QPSErr {
				break
			}
			p := q.dest.Load()
			if p == nil || !p.acquire() {
				break
			}
			st := verbs.QPState(u32(p.slot, offState).Load())
			p.release()
			if st != verbs.QPSReset && st != verbs.QPSInit {
				break
			}
		}
		q.sqMu.Lock()
		q.watching = false
		q.sqMu.Unlock()
		q.progress()
	}()
}

// waitRoom reports whether there is room, and otherwise sets our
// txBlocked word (the peer rings our send CQ after it consumes) and looks
// once more, in that order, so a consumer cannot be missed.
func (q *QP) waitRoom(p *peerQP, n int) (bool, error) {
	ok, err := q.room(p, n)
	if ok || err != nil {
		return ok, err
	}
	if !q.blocked {
		q.blocked = true
		u32(q.slot, offTxBlocked).Store(1)
	}
	return q.room(p, n)
}

// publish adds an entry to the peer's ring.
func (q *QP) publish(p *peerQP, e entry) {
	writeEntry(p.slot, q.prod, e)
	q.prod++
	u64(p.slot, offProd).Store(q.prod)
}

// remote returns the peer's region rkey, pinned, checking its PD and
// access against the peer QP's; nil and a status when it may not be used.
func (q *QP) remote(p *peerQP, rkey uint32, need verbs.Access) (*remoteMR, verbs.WCStatus, bool) {
	r := q.mrCache
	if r == nil || r.rkey != rkey || r.dead.Load() {
		q.dev.mu.Lock()
		r = q.dev.peerMRs[rkey]
		q.dev.mu.Unlock()
		if r == nil {
			return nil, verbs.WCRemAccessErr, false
		}
		q.mrCache = r
	}
	qpAccess := verbs.Access(u32(p.slot, offAccess).Load())
	if r.pd != p.pd || !r.access.Has(need) || !qpAccess.Has(need) || !r.acquire() {
		return nil, verbs.WCRemAccessErr, true
	}
	return r, verbs.WCSuccess, true
}

// execute carries out one send request. It returns sendBlocked when the
// peer's ring has no room, sendSync when the peer's region is not known
// (unless synced: then it is an access error); the peer QP written to (to ring after the lock is released);
// and an error only for a violation by the peer. data, when not nil, is
// the request's payload in ordinary memory (inline); otherwise its SGEs
// name registered memory. The caller holds sqMu.
func (q *QP) execute(wr *verbs.SendWR, data [][]byte, synced bool) (int, *peerQP, error) {
	wc := verbs.WC{WRID: wr.ID, Opcode: wcOpcode(wr.Opcode), QPN: q.qpn}
	fail := func(st verbs.WCStatus, cause error) (int, *peerQP, error) {
		if cause != nil {
			q.setCause(cause)
		}
		q.toErr(&wc, st)
		return sendDone, nil, nil
	}
	p := q.dest.Load()
	if p == nil || !p.acquire() {
		if err := q.dev.deadErr(); err != nil {
			return fail(verbs.WCRetryExcErr, err)
		}
		if p != nil {
			// The peer destroyed its queue pair: what it published
			// before (its last data, its close) is delivered first.
			if viol := q.harvestHeld(); viol != nil {
				return sendDone, nil, viol
			}
			return fail(verbs.WCRetryExcErr, ErrQPGone)
		}
		return fail(verbs.WCRetryExcErr, fmt.Errorf("shm: the peer's queue pair %#x is gone", q.destQPN))
	}
	defer p.release()
	switch verbs.QPState(u32(p.slot, offState).Load()) {
	case verbs.QPSRTR, verbs.QPSRTS, verbs.QPSSQD, verbs.QPSSQE:
	case verbs.QPSReset, verbs.QPSInit:
		// Not ready yet: wait until the peer's Modify rings us.
		if !q.blocked {
			q.blocked = true
			u32(q.slot, offTxBlocked).Store(1)
		}
		if st := verbs.QPState(u32(p.slot, offState).Load()); st == verbs.QPSReset || st == verbs.QPSInit {
			q.watchReady()
			return sendBlocked, nil, nil
		}
	default:
		return fail(verbs.WCRetryExcErr, fmt.Errorf("shm: the peer's queue pair %#x is in the error state", p.qpn))
	}
	var srcs [][]byte
	var n int
	if data != nil {
		srcs = data
		for _, s := range srcs {
			n += len(s)
		}
	} else if wr.Opcode != verbs.WRRDMARead && wr.Opcode < verbs.WRAtomicCmpAndSwp {
		var ok bool
		if srcs, ok = q.gather(wr, false); !ok {
			return fail(verbs.WCLocProtErr, nil)
		}
		for _, s := range srcs {
			n += len(s)
		}
	}
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm:
		ool := n > inlineMax
		need := n
		if ool {
			need = 0
		}
		ok, err := q.waitRoom(p, need)
		if err != nil || !ok {
			return sendBlocked, nil, err
		}
		e := entry{op: entSend, len: uint32(n)}
		if wr.Opcode == verbs.WRSendWithImm {
			e.op, e.imm = entSendImm, wr.Imm
		}
		if ool {
			if err := q.sendOOL(srcs, n); err != nil {
				return fail(verbs.WCLocQPOpErr, err)
			}
			e.flags = entFlagOOL
		} else {
			c := q.dataHead
			for _, s := range srcs {
				ringCopyIn(p.slot, c, s)
				c += uint64(len(s))
			}
			q.dataHead = c
		}
		q.publish(p, e)
		q.complete(&wc, wr)
		return sendDone, p, nil
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		imm := wr.Opcode == verbs.WRRDMAWriteWithImm
		if imm {
			ok, err := q.waitRoom(p, 0)
			if err != nil || !ok {
				return sendBlocked, nil, err
			}
		}
		if n > 0 {
			r, st, known := q.remote(p, wr.RKey, verbs.AccessRemoteWrite)
			if !known && !synced {
				return sendSync, nil, nil
			}
			if r == nil {
				return fail(st, nil)
			}
			dst, ok := r.span(wr.RemoteAddr, uint32(n))
			if !ok {
				r.release()
				return fail(verbs.WCRemAccessErr, nil)
			}
			for _, s := range srcs {
				dst = dst[copy(dst, s):]
			}
			r.release()
		}
		if imm {
			q.publish(p, entry{op: entWriteImm, imm: wr.Imm, len: uint32(n)})
			q.complete(&wc, wr)
			return sendDone, p, nil
		}
		q.complete(&wc, wr)
		return sendDone, nil, nil
	case verbs.WRRDMARead:
		dsts, ok := q.gather(wr, true)
		if !ok {
			return fail(verbs.WCLocProtErr, nil)
		}
		for _, d := range dsts {
			n += len(d)
		}
		if n > 0 {
			r, st, known := q.remote(p, wr.RKey, verbs.AccessRemoteRead)
			if !known && !synced {
				return sendSync, nil, nil
			}
			if r == nil {
				return fail(st, nil)
			}
			src, ok := r.span(wr.RemoteAddr, uint32(n))
			if !ok {
				r.release()
				return fail(verbs.WCRemAccessErr, nil)
			}
			for _, d := range dsts {
				src = src[copy(d, src):]
			}
			r.release()
		}
		wc.ByteLen = uint32(n)
		q.complete(&wc, wr)
		return sendDone, nil, nil
	default: // atomics
		dsts, ok := q.gather(wr, true)
		if !ok || len(dsts) != 1 {
			return fail(verbs.WCLocProtErr, nil)
		}
		r, st, known := q.remote(p, wr.RKey, verbs.AccessRemoteAtomic)
		if !known && !synced {
			return sendSync, nil, nil
		}
		if r == nil {
			return fail(st, nil)
		}
		word, ok := r.span(wr.RemoteAddr, 8)
		if !ok {
			r.release()
			return fail(verbs.WCRemAccessErr, nil)
		}
		if wr.RemoteAddr%8 != 0 {
			r.release()
			return fail(verbs.WCRemInvReqErr, nil)
		}
		w := (*atomic.Uint64)(unsafe.Pointer(&word[0]))
		var old uint64
		if wr.Opcode == verbs.WRAtomicFetchAdd {
			old = w.Add(wr.CompareAdd) - wr.CompareAdd
		} else {
			for {
				old = w.Load()
				if old != wr.CompareAdd || w.CompareAndSwap(old, wr.Swap) {
					break
				}
			}
		}
		r.release()
		*(*uint64)(unsafe.Pointer(&dsts[0][0])) = old
		wc.ByteLen = 8
		q.complete(&wc, wr)
		return sendDone, nil, nil
	}
}

// complete reports a successful request if it is signaled.
func (q *QP) complete(wc *verbs.WC, wr *verbs.SendWR) {
	if q.sigAll || wr.Flags&verbs.SendSignaled != 0 {
		q.sendCQ.push(wc)
	}
}

// sendOOL sends a large SEND's payload in a sealed memfd of its own over
// the channel, ahead of its ring entry. (A rare path: rsock sends only
// small control messages.)
func (q *QP) sendOOL(srcs [][]byte, n int) error {
	fd, err := newMemfd("rsock-shm-send", n, nil)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	off := int64(0)
	for _, s := range srcs {
		for len(s) > 0 {
			k, err := unix.Pwrite(fd, s, off)
			if err != nil {
				return fmt.Errorf("shm: write out-of-line message: %w", err)
			}
			s, off = s[k:], off+int64(k)
		}
	}
	return q.dev.send(&msg{typ: msgOOL, a: q.destQPN, b: uint32(n)}, fd)
}
