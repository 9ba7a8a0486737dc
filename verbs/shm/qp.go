//go:build linux

package shm

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// QP is a reliable-connected queue pair. Its sends are carried out during
// the post (a copy into the peer's memory and an entry in the peer QP's
// inbound ring); a send that finds the peer's ring full waits in the send
// queue until the peer consumes, and moves on when this process posts or
// polls its send CQ.
type QP struct {
	dev     *Device
	pd      *PD
	qpn     uint32
	slotIdx int
	slot    []byte // our inbound ring, in our arena
	sendCQ  *CQ
	recvCQ  *CQ
	cap     verbs.QPCap
	sigAll  bool
	state   atomic.Uint32

	mu     sync.Mutex // attributes (but State) and closed
	attr   verbs.QPAttr
	closed bool
	gone   atomic.Bool // closed: CQ polls skip it

	causeMu sync.Mutex
	cause   error

	sqMu     sync.Mutex
	dest     atomic.Pointer[peerQP] // the peer's QP, from RTR; written under sqMu
	destQPN  uint32                 // under sqMu
	pending  []sendWQE              // sends waiting for room at the peer, in order
	npending atomic.Int32
	prod     uint64 // entries we published into the peer's ring
	dataHead uint64 // bytes we put in its data area
	peerCons uint64 // the peer's consumer cursors as last read
	peerData uint64
	blocked  bool // our txBlocked word is set
	watching bool // watchReady's goroutine runs; under sqMu
	mrCache  *remoteMR
	srcs     [][]byte  // scratch scatter/gather list
	one      [1][]byte // scratch: one inline payload

	rqMu     sync.Mutex
	rq       []recvWQE
	rqHead   uint32
	rqTail   uint32
	posted   atomic.Int32
	cons     uint64 // entries consumed from our ring
	consA    atomic.Uint64
	dataTail uint64 // bytes consumed from our data area

	oolMu sync.Mutex
	ool   []oolMsg
}

var (
	_ verbs.QP           = (*QP)(nil)
	_ verbs.Causer       = (*QP)(nil)
	_ verbs.InlineWriter = (*QP)(nil)
)

type sendWQE struct {
	wr     verbs.SendWR
	sgl    []verbs.SGE
	inline []byte
}

type recvWQE struct {
	id    uint64
	bufs  [][]byte
	total uint64
	bad   bool
}

// oolMsg is a large SEND's memfd, waiting for its ring entry.
type oolMsg struct {
	fd int
	n  uint32
}

// CreateQP creates an RC queue pair in RESET and announces it to the peer.
func (p *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	d := p.dev
	if attr == nil {
		return nil, fmt.Errorf("shm: nil QPInitAttr: %w", verbs.ErrInvalidArgument)
	}
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("shm: QP needs CQs of its device: %w", verbs.ErrInvalidArgument)
	}
	c := attr.Cap
	if c.MaxSendWR == 0 || c.MaxSendWR > 1<<16 || c.MaxRecvWR > 1<<16 || c.MaxSendSGE > 64 || c.MaxRecvSGE > 64 {
		return nil, fmt.Errorf("shm: QP capabilities %+v: %w", c, verbs.ErrInvalidArgument)
	}
	c.MaxSendSGE, c.MaxRecvSGE = max(c.MaxSendSGE, 1), max(c.MaxRecvSGE, 1)
	c.MaxInlineData = max(c.MaxInlineData, 1<<20)
	d.mu.Lock()
	if d.closed || d.dead != nil {
		d.mu.Unlock()
		return nil, verbs.ErrClosed
	}
	if len(d.slotFree) == 0 {
		d.mu.Unlock()
		return nil, fmt.Errorf("shm: %d queue pairs in use: %w", d.maxQPs, verbs.ErrQueueFull)
	}
	slot := d.slotFree[len(d.slotFree)-1]
	d.slotFree = d.slotFree[:len(d.slotFree)-1]
	d.slotGen[slot]++
	if d.slotGen[slot] == 0 {
		d.slotGen[slot] = 1
	}
	qpn := uint32(d.slotGen[slot])<<16 | uint32(slot)
	off := slotsOffset(d.maxQPs) + slot*slotSize
	q := &QP{dev: d, pd: p, qpn: qpn, slotIdx: slot, slot: d.arena[off : off+slotSize : off+slotSize],
		sendCQ: scq, recvCQ: rcq, cap: c, sigAll: attr.SigAll, rq: make([]recvWQE, max(c.MaxRecvWR, 1))}
	clear(q.slot[:offData])
	d.qps[qpn] = q
	d.mu.Unlock()
	if err := d.send(&msg{typ: msgQPNew, a: qpn, b: uint32(slot), c: uint32(rcq.idx), d: uint32(scq.idx), e: p.id}, -1); err != nil {
		d.mu.Lock()
		delete(d.qps, qpn)
		d.slotFree = append(d.slotFree, slot)
		d.mu.Unlock()
		return nil, err
	}
	rcq.mu.Lock()
	rcq.recvQPs = append(rcq.recvQPs, q)
	rcq.mu.Unlock()
	scq.mu.Lock()
	scq.sendQPs = append(scq.sendQPs, q)
	scq.mu.Unlock()
	p.refs.Add(1)
	return q, nil
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// State returns the current state.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.state.Load()) }

func (q *QP) setState(s verbs.QPState) {
	q.state.Store(uint32(s))
	u32(q.slot, offState).Store(uint32(s))
}

// Query returns the current attributes.
func (q *QP) Query() verbs.QPAttr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.State = q.State()
	a.Cap = q.cap
	return a
}

// Cause says why the QP failed when the status does not: the peer left,
// broke the protocol, or the device was closed.
func (q *QP) Cause() error {
	q.causeMu.Lock()
	defer q.causeMu.Unlock()
	return q.cause
}

func (q *QP) setCause(err error) {
	q.causeMu.Lock()
	if q.cause == nil {
		q.cause = err
	}
	q.causeMu.Unlock()
}

// Modify changes attributes and state, as ibv_modify_qp; transitions are
// checked by verbs.CheckTransition.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil {
		return fmt.Errorf("shm: nil QPAttr: %w", verbs.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return verbs.ErrClosed
	}
	cur := q.State()
	next := cur
	if mask&verbs.AttrState != 0 {
		next = attr.State
	}
	if next > verbs.QPSErr {
		return fmt.Errorf("shm: QP state %v: %w", next, verbs.ErrInvalidArgument)
	}
	if err := verbs.CheckTransition(cur, next, mask); err != nil {
		return err
	}
	switch {
	case mask&verbs.AttrPort != 0 && attr.Port != 1,
		mask&verbs.AttrPathMTU != 0 && (attr.PathMTU.Bytes() == 0 || attr.PathMTU > verbs.MTU4096),
		mask&verbs.AttrDestQPN != 0 && attr.DestQPN >= 1<<24,
		mask&verbs.AttrTimeout != 0 && attr.Timeout > 31,
		mask&verbs.AttrRetryCnt != 0 && attr.RetryCnt > 7,
		mask&verbs.AttrRNRRetry != 0 && attr.RNRRetry > 7,
		mask&verbs.AttrAccessFlags != 0 && attr.AccessFlags&^(verbs.AccessLocalWrite|remoteAccess) != 0:
		return fmt.Errorf("shm: QP attributes %#x: %w", uint32(mask), verbs.ErrInvalidArgument)
	}
	a := &q.attr
	a.Apply(attr, mask)
	if mask&verbs.AttrAccessFlags != 0 {
		u32(q.slot, offAccess).Store(uint32(attr.AccessFlags))
	}
	if next == cur {
		return nil
	}
	switch next {
	case verbs.QPSReset:
		q.reset()
	case verbs.QPSRTR:
		if err := q.connect(a.DestQPN); err != nil {
			return err
		}
	case verbs.QPSErr:
		q.setCause(errors.New("shm: QP moved to ERR by Modify"))
		q.sqMu.Lock()
		q.toErr(nil, 0)
		q.sqMu.Unlock()
		return nil
	}
	q.setState(next)
	if next == verbs.QPSRTR || next == verbs.QPSRTS {
		q.wakePeerSender() // a peer send may wait for us to be ready
	}
	return nil
}

// connect aims the QP at the peer's queue pair qpn.
func (q *QP) connect(qpn uint32) error {
	d := q.dev
	p := d.peerQP(qpn)
	if p == nil {
		if err := d.sync(); err != nil {
			q.mu.Unlock()
			d.fail(err, false)
			q.mu.Lock()
			return err
		}
		if p = d.peerQP(qpn); p == nil {
			return fmt.Errorf("shm: the peer has no queue pair %#x: %w", qpn, verbs.ErrInvalidArgument)
		}
	}
	q.sqMu.Lock()
	q.dest.Store(p)
	q.destQPN = qpn
	q.prod, q.dataHead, q.peerCons, q.peerData = 0, 0, 0, 0
	if p.dead.Load() {
		// The peer destroyed it meanwhile, after the channel's handler
		// looked for queue pairs connected to it: none will wake ours.
		q.dest.Store(nil)
		q.sqMu.Unlock()
		return fmt.Errorf("shm: the peer's queue pair %#x is gone: %w", qpn, verbs.ErrInvalidArgument)
	}
	q.sqMu.Unlock()
	return nil
}

// peerLeft reports whether the peer destroyed the queue pair ours is
// connected to.
func (q *QP) peerLeft() bool {
	p := q.dest.Load()
	return p != nil && p.dead.Load()
}

// leaving reports whether the QP waits to fail because the peer
// destroyed its end and everything it published has been delivered: the
// next harvest fails it.
func (q *QP) leaving() bool {
	return q.peerLeft() && q.State() != verbs.QPSErr && u64(q.slot, offProd).Load() == q.consA.Load()
}

// leaveIfDrained fails the QP with ErrQPGone once the peer destroyed its
// end and every entry it published before (its last data, an in-band
// close) was taken from our inbound ring: the peer published them before
// it announced the destruction, so none is lost. Entries that wait for
// a receive to be posted keep the QP up until they are taken.
func (q *QP) leaveIfDrained() {
	if !q.peerLeft() {
		return
	}
	q.sqMu.Lock()
	defer q.sqMu.Unlock()
	if q.State() == verbs.QPSErr || q.gone.Load() {
		return
	}
	q.rqMu.Lock()
	drained := u64(q.slot, offProd).Load() == q.cons
	q.rqMu.Unlock()
	if !drained {
		return
	}
	q.setCause(ErrQPGone)
	q.failHead()
}

// failHead moves the QP to ERR as a transport failure: the request being
// carried out (the first queued) completes with WCRetryExcErr, the rest
// are flushed. The caller holds sqMu.
func (q *QP) failHead() {
	var failed *verbs.WC
	if len(q.pending) > 0 {
		w := q.pending[0]
		q.pending = q.pending[1:]
		failed = &verbs.WC{WRID: w.wr.ID, Opcode: wcOpcode(w.wr.Opcode), QPN: q.qpn}
	}
	q.toErr(failed, verbs.WCRetryExcErr)
}

func (d *Device) peerQP(qpn uint32) *peerQP {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.peerQPs[qpn]
}

// reset discards every queued request and cursor.
func (q *QP) reset() {
	q.sqMu.Lock()
	q.dest.Store(nil)
	q.pending = q.pending[:0]
	q.npending.Store(0)
	q.prod, q.dataHead, q.peerCons, q.peerData, q.blocked = 0, 0, 0, 0, false
	q.sqMu.Unlock()
	q.rqMu.Lock()
	q.rqHead, q.rqTail = 0, 0
	q.posted.Store(0)
	q.cons, q.dataTail = 0, 0
	q.consA.Store(0)
	clear(q.slot[:offData])
	q.rqMu.Unlock()
	keep := q.attr
	q.attr = verbs.QPAttr{}
	q.attr.Port = keep.Port
}

// toErr moves the QP to ERR: the request being carried out (if any)
// completes with status, every other queued request with WCWRFlushErr.
// The caller holds sqMu.
func (q *QP) toErr(failed *verbs.WC, status verbs.WCStatus) {
	q.setState(verbs.QPSErr)
	if failed != nil {
		failed.Status = status
		q.sendCQ.push(failed)
	}
	for i := range q.pending {
		w := &q.pending[i]
		q.sendCQ.push(&verbs.WC{WRID: w.wr.ID, Status: verbs.WCWRFlushErr, Opcode: wcOpcode(w.wr.Opcode), QPN: q.qpn})
		w.sgl, w.inline = w.sgl[:0], w.inline[:0]
	}
	q.pending = q.pending[:0]
	q.npending.Store(0)
	q.flushRecv()
}

// flushRecv completes every posted receive with WCWRFlushErr.
func (q *QP) flushRecv() {
	q.rqMu.Lock()
	for ; q.rqHead != q.rqTail; q.rqHead++ {
		w := &q.rq[q.rqHead%uint32(len(q.rq))]
		q.recvCQ.push(&verbs.WC{WRID: w.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn})
	}
	q.posted.Store(0)
	q.rqMu.Unlock()
}

// peerGone fails the QP when the channel ends; a graceful end first
// completes what the peer delivered.
func (q *QP) peerGone(cause error, graceful bool) {
	if graceful {
		q.harvest()
	}
	q.setCause(cause)
	q.sqMu.Lock()
	if q.State() != verbs.QPSErr || len(q.pending) > 0 {
		q.failHead()
	} else {
		q.flushRecv()
	}
	q.sqMu.Unlock()
}

// Close destroys the QP; the peer is told, and its slot is reused once
// the peer acknowledged that it stopped writing into it.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.gone.Store(true)
	q.mu.Unlock()
	q.sqMu.Lock()
	q.setState(verbs.QPSErr)
	q.dest.Store(nil)
	q.pending = q.pending[:0]
	q.npending.Store(0)
	q.sqMu.Unlock()
	for _, c := range []*CQ{q.recvCQ, q.sendCQ} {
		c.mu.Lock()
		c.recvQPs = without(c.recvQPs, q)
		c.sendQPs = without(c.sendQPs, q)
		c.mu.Unlock()
	}
	q.oolMu.Lock()
	for _, m := range q.ool {
		unix.Close(m.fd)
	}
	q.ool = nil
	q.oolMu.Unlock()
	d := q.dev
	d.mu.Lock()
	delete(d.qps, q.qpn)
	alive := d.dead == nil
	if alive {
		d.pendingAk[q.qpn] = q.slotIdx
	} else {
		d.slotFree = append(d.slotFree, q.slotIdx)
	}
	d.mu.Unlock()
	if alive {
		d.send(&msg{typ: msgQPGone, a: q.qpn}, -1) // a failure ends the channel anyway
	}
	q.pd.refs.Add(-1)
	return nil
}

func without(qs []*QP, q *QP) []*QP {
	out := make([]*QP, 0, len(qs))
	for _, x := range qs {
		if x != q {
			out = append(out, x)
		}
	}
	return out
}

// PostRecv queues receive work requests.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if q.isClosed() {
		return 0, verbs.ErrClosed
	}
	st := q.State()
	if st == verbs.QPSReset {
		return 0, fmt.Errorf("shm: post recv in RESET: %w", verbs.ErrInvalidState)
	}
	q.rqMu.Lock()
	for i := range wrs {
		wr := &wrs[i]
		if uint32(len(wr.SGL)) > q.cap.MaxRecvSGE {
			q.rqMu.Unlock()
			return i, fmt.Errorf("shm: %d SGEs, QP allows %d: %w", len(wr.SGL), q.cap.MaxRecvSGE, verbs.ErrInvalidArgument)
		}
		if q.rqTail-q.rqHead == uint32(len(q.rq)) || q.cap.MaxRecvWR == 0 {
			q.rqMu.Unlock()
			return i, verbs.ErrQueueFull
		}
		w := &q.rq[q.rqTail%uint32(len(q.rq))]
		w.id, w.bufs, w.total, w.bad = wr.ID, w.bufs[:0], 0, false
		for _, s := range wr.SGL {
			m := q.dev.lookupMR(s.LKey)
			var b []byte
			ok := m != nil && m.pd == q.pd && m.access.Has(verbs.AccessLocalWrite)
			if ok {
				b, ok = m.slice(s.Addr, s.Length)
			}
			if !ok {
				w.bad = true
				continue
			}
			w.bufs = append(w.bufs, b)
			w.total += uint64(s.Length)
		}
		q.rqTail++
		q.posted.Add(1)
	}
	q.rqMu.Unlock()
	if q.State() == verbs.QPSErr {
		q.flushRecv()
	} else {
		q.recvCQ.wakeLocal() // arrivals may have waited for a receive
	}
	return len(wrs), nil
}

func (q *QP) isClosed() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.closed
}

// wcOpcode maps a send opcode to its completion opcode.
func wcOpcode(op verbs.WROpcode) verbs.WCOpcode {
	switch op {
	case verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm:
		return verbs.WCRDMAWrite
	case verbs.WRRDMARead:
		return verbs.WCRDMARead
	case verbs.WRAtomicCmpAndSwp:
		return verbs.WCCompSwap
	case verbs.WRAtomicFetchAdd:
		return verbs.WCFetchAdd
	}
	return verbs.WCSend
}
