package softroce

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Limits of a soft-RoCE QP.
const (
	maxWR        = 1 << 16
	maxSGE       = 32
	maxInline    = 4096
	txBatch      = 32
	ackReqPeriod = 64 // at most this many packets between AckReq bits
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
	readHigh uint32 // the most READ response packets ever asked for
	done     bool   // READ or atomic has all its response
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

// QP is a soft-RoCE reliable-connected queue pair. Its mutex guards the
// requester, completer and responder state; the receive loop, the poster
// and the timer take it in turn.
type QP struct {
	dev    *Device
	pd     *PD
	qpn    uint32
	sendCQ *CQ
	recvCQ *CQ
	sigAll bool
	cap    verbs.QPCap

	state atomic.Uint32 // mirror of attr.State for lock-free State()
	stats counters

	mu        sync.Mutex
	closed    bool
	attr      verbs.QPAttr
	peer      netip.AddrPort
	mtu       uint32
	selective bool  // selective repeat negotiated (SetSelectiveRepeat)
	sendErr   error // the last error of the link's Send for this QP
	cause     error // why the QP went to ERR, when the reason is local

	// Congestion control (congestion_qp.go): negotiated
	// (SetCongestionControl); when the pacer lets the next packet go (0:
	// not waiting); the controller's events already counted.
	congestion bool
	paceAt     int64
	ccEvents   uint64

	// Send queue: a ring indexed by free-running counters.
	// sqHead ≤ sqNext ≤ sqTail: [sqHead, sqNext) are transmitted and not
	// yet completed, [sqNext, sqTail) wait for (re)transmission.
	sq          []sendWQE
	sqHead      uint32
	sqNext      uint32
	sqTail      uint32
	sgeStore    []verbs.SGE
	inlineStore []byte

	rq         []recvWQE
	rqHead     uint32
	rqTail     uint32
	rqSGEStore []verbs.SGE

	req  requesterState
	comp completerState
	resp responderState

	// tx holds request packets being built, in buffers borrowed from
	// the device (txb) while the QP transmits.
	tx        []link.Packet
	txb       *txBuffers
	txN       int
	txq       []*txBuffers // built batches waiting to be sent, in PSN order
	txSending bool         // a goroutine is sending txq with q.mu released
	timer     *time.Timer
	// timerAt is when timer fires (monotonic ns), or 0 when stopped.
	timerAt int64
}

var _ verbs.QP = (*QP)(nil)

// CreateQP creates an RC QP in the RESET state.
func (p *PD) CreateQP(init *verbs.QPInitAttr) (verbs.QP, error) {
	d := p.dev
	if init == nil {
		return nil, fmt.Errorf("softroce: nil QPInitAttr: %w", verbs.ErrInvalidArgument)
	}
	scq, ok1 := init.SendCQ.(*CQ)
	rcq, ok2 := init.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.dev != d || rcq.dev != d {
		return nil, fmt.Errorf("softroce: QP needs CQs of the same device: %w", verbs.ErrInvalidArgument)
	}
	c := init.Cap
	if c.MaxSendWR == 0 || c.MaxSendWR > maxWR || c.MaxRecvWR > maxWR ||
		c.MaxSendSGE > maxSGE || c.MaxRecvSGE > maxSGE || c.MaxInlineData > maxInline {
		return nil, fmt.Errorf("softroce: QP capabilities %+v beyond %d WRs, %d SGEs, %d inline bytes: %w",
			c, maxWR, maxSGE, maxInline, verbs.ErrInvalidArgument)
	}
	if c.MaxSendSGE == 0 {
		c.MaxSendSGE = 1
	}
	if c.MaxRecvSGE == 0 {
		c.MaxRecvSGE = 1
	}
	if p.dead.Load() {
		return nil, verbs.ErrClosed
	}
	q := &QP{
		dev:         d,
		pd:          p,
		sendCQ:      scq,
		recvCQ:      rcq,
		sigAll:      init.SigAll,
		cap:         c,
		sq:          make([]sendWQE, c.MaxSendWR),
		sgeStore:    make([]verbs.SGE, c.MaxSendWR*c.MaxSendSGE),
		inlineStore: make([]byte, int(c.MaxSendWR)*int(c.MaxInlineData)),
		rq:          make([]recvWQE, max(c.MaxRecvWR, 1)),
		rqSGEStore:  make([]verbs.SGE, max(c.MaxRecvWR, 1)*c.MaxRecvSGE),
	}
	for i := range q.sq {
		q.sq[i].sgl = q.sgeStore[i*int(c.MaxSendSGE) : i*int(c.MaxSendSGE)]
		q.sq[i].inline = q.inlineStore[i*int(c.MaxInlineData) : i*int(c.MaxInlineData)]
	}
	for i := range q.rq {
		q.rq[i].sgl = q.rqSGEStore[i*int(c.MaxRecvSGE) : i*int(c.MaxRecvSGE)]
	}
	q.timer = time.AfterFunc(time.Hour, q.onTimer)
	q.timer.Stop()

	d.qpMu.Lock()
	defer d.qpMu.Unlock()
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	n, ok := pickQPN(randomUint32, func(n uint32) bool { return d.qps[n] != nil })
	if !ok {
		return nil, fmt.Errorf("softroce: every QP number is in use: %w", verbs.ErrBusy)
	}
	q.qpn = n
	d.qps[q.qpn] = q
	p.refs.Add(1)
	return q, nil
}

// QPN returns the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// State returns the current state.
func (q *QP) State() verbs.QPState { return verbs.QPState(q.state.Load()) }

// Counters returns this QP's statistics.
func (q *QP) Counters() verbs.Counters { return q.stats.snapshot() }

// count adds to a statistic of the QP and of its device.
func (q *QP) count(k counter, n uint64) {
	q.stats.add(k, n)
	q.dev.stats.add(k, n)
}

// Query returns the current attributes.
func (q *QP) Query() verbs.QPAttr {
	q.mu.Lock()
	defer q.mu.Unlock()
	a := q.attr
	a.Cap = q.cap
	return a
}

// Modify changes attributes and state, as ibv_modify_qp.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	if attr == nil {
		return fmt.Errorf("softroce: nil QPAttr: %w", verbs.ErrInvalidArgument)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		return verbs.ErrClosed
	}
	cur := q.attr.State
	next := cur
	if mask&verbs.AttrState != 0 {
		next = attr.State
	}
	if next > verbs.QPSErr {
		return fmt.Errorf("softroce: QP state %v: %w", next, verbs.ErrInvalidArgument)
	}
	if err := verbs.CheckTransition(cur, next, mask); err != nil {
		return err
	}
	if err := q.checkAttr(attr, mask); err != nil {
		return err
	}
	a := &q.attr
	if mask&verbs.AttrAccessFlags != 0 {
		a.AccessFlags = attr.AccessFlags
	}
	if mask&verbs.AttrPKeyIndex != 0 {
		a.PKeyIndex = attr.PKeyIndex
	}
	if mask&verbs.AttrPort != 0 {
		a.Port = attr.Port
	}
	if mask&verbs.AttrAV != 0 {
		a.AH = attr.AH
		port := attr.AH.DPort
		if port == 0 {
			port = link.RoCEv2Port
		}
		q.peer = netip.AddrPortFrom(attr.AH.DGID.Addr(), port)
	}
	if mask&verbs.AttrPathMTU != 0 {
		a.PathMTU = attr.PathMTU
		q.mtu = uint32(attr.PathMTU.Bytes())
	}
	if mask&verbs.AttrTimeout != 0 {
		a.Timeout = attr.Timeout
	}
	if mask&verbs.AttrRetryCnt != 0 {
		a.RetryCnt = attr.RetryCnt
	}
	if mask&verbs.AttrRNRRetry != 0 {
		a.RNRRetry = attr.RNRRetry
	}
	if mask&verbs.AttrRQPSN != 0 {
		a.RQPSN = attr.RQPSN
	}
	if mask&verbs.AttrMaxQPRdAtomic != 0 {
		a.MaxRdAtomic = attr.MaxRdAtomic
	}
	if mask&verbs.AttrMinRNRTimer != 0 {
		a.MinRNRTimer = attr.MinRNRTimer
	}
	if mask&verbs.AttrSQPSN != 0 {
		a.SQPSN = attr.SQPSN
	}
	if mask&verbs.AttrMaxDestRdAtomic != 0 {
		a.MaxDestRdAtomic = attr.MaxDestRdAtomic
	}
	if mask&verbs.AttrDestQPN != 0 {
		a.DestQPN = attr.DestQPN
	}
	if next == cur {
		return nil
	}
	switch next {
	case verbs.QPSReset:
		q.reset()
	case verbs.QPSRTR:
		q.resp.reset(a.RQPSN, int(a.MaxDestRdAtomic))
	case verbs.QPSRTS:
		if cur == verbs.QPSRTR {
			q.req = requesterState{nextPSN: a.SQPSN, highPSN: a.SQPSN}
			q.comp = completerState{ackedPSN: psnAdd(a.SQPSN, wire.PSNMask), retryLeft: a.RetryCnt, rnrLeft: a.RNRRetry,
				win: newSendWindow(q.dev.maxInflight, a.SQPSN)}
			if q.selective {
				q.comp.sb = newScoreboard(sackWindow)
				q.comp.win = newProportionalWindow(min(q.dev.maxInflight, sackWindow/2), a.SQPSN)
				q.startCongestion(q.comp.win.max, a.SQPSN)
			}
		}
	case verbs.QPSErr:
		q.setState(verbs.QPSErr)
		q.flush(q.sqTail, 0)
		return nil
	}
	q.setState(next)
	if next == verbs.QPSRTS {
		q.runRequester()
	}
	return nil
}

// checkAttr validates the attribute values selected by mask.
func (q *QP) checkAttr(a *verbs.QPAttr, mask verbs.QPAttrMask) error {
	bad := func(what string, v any) error {
		return fmt.Errorf("softroce: QP attribute %s=%v: %w", what, v, verbs.ErrInvalidArgument)
	}
	port := q.dev.port
	switch {
	case mask&verbs.AttrPort != 0 && a.Port != 1:
		return bad("port", a.Port)
	case mask&verbs.AttrPathMTU != 0 && (a.PathMTU.Bytes() == 0 || a.PathMTU > port.MaxMTU):
		return bad("path_mtu", a.PathMTU)
	case mask&verbs.AttrAV != 0 && int(a.AH.SGIDIndex) >= len(port.GIDs):
		return bad("sgid_index", a.AH.SGIDIndex)
	case mask&verbs.AttrAV != 0 && !a.AH.DGID.Addr().IsValid():
		return bad("dgid", a.AH.DGID)
	case mask&verbs.AttrAV != 0 && a.AH.DGID.Addr().IsUnspecified():
		return bad("dgid", a.AH.DGID)
	case mask&verbs.AttrDestQPN != 0 && a.DestQPN > wire.PSNMask:
		return bad("dest_qp_num", a.DestQPN)
	case mask&verbs.AttrRQPSN != 0 && a.RQPSN > wire.PSNMask:
		return bad("rq_psn", a.RQPSN)
	case mask&verbs.AttrSQPSN != 0 && a.SQPSN > wire.PSNMask:
		return bad("sq_psn", a.SQPSN)
	case mask&verbs.AttrTimeout != 0 && a.Timeout > 31:
		return bad("timeout", a.Timeout)
	case mask&verbs.AttrRetryCnt != 0 && a.RetryCnt > 7:
		return bad("retry_cnt", a.RetryCnt)
	case mask&verbs.AttrRNRRetry != 0 && a.RNRRetry > 7:
		return bad("rnr_retry", a.RNRRetry)
	case mask&verbs.AttrMinRNRTimer != 0 && a.MinRNRTimer > 31:
		return bad("min_rnr_timer", a.MinRNRTimer)
	case mask&verbs.AttrMaxDestRdAtomic != 0 && a.MaxDestRdAtomic > 128:
		return bad("max_dest_rd_atomic", a.MaxDestRdAtomic)
	}
	return nil
}

func (q *QP) setState(s verbs.QPState) {
	q.attr.State = s
	q.state.Store(uint32(s))
}

// txBuffers is a batch of request packet buffers. A QP borrows one from
// its device's pool only while it transmits, so that idle QPs (thousands
// of mostly quiet connections) hold no packet memory.
type txBuffers struct {
	pkts []link.Packet
	n    int // packets built, while queued
	// held is, by packet, the memory region its Tail points into, and
	// refs how many are set.
	held []*MR
	refs int
}

// hold records that packet i points into m's memory (nil: into none),
// letting go of the region it pointed into before.
func (t *txBuffers) hold(i int, m *MR) {
	if old := t.held[i]; old != nil {
		old.sending.Add(-1)
		t.refs--
	}
	if m != nil {
		m.sending.Add(1)
		t.refs++
	}
	t.held[i] = m
}

// release lets go of every region the batch's packets point into.
func (t *txBuffers) release() {
	if t.refs == 0 {
		return
	}
	for i := range t.held {
		t.hold(i, nil)
		t.pkts[i].Tail = nil
	}
}

// putTx returns a batch to the pool.
func (d *Device) putTx(b *txBuffers) {
	b.release()
	d.txPool.Put(b)
}

func newTxBuffers() any {
	t := &txBuffers{pkts: make([]link.Packet, txBatch), held: make([]*MR, txBatch)}
	mem := make([]byte, txBatch*maxPacketLen)
	for i := range t.pkts {
		t.pkts[i].Buf = mem[i*maxPacketLen : (i+1)*maxPacketLen : (i+1)*maxPacketLen]
	}
	return t
}

// borrowTx makes q.tx usable. The caller holds q.mu.
func (q *QP) borrowTx() {
	if q.txb == nil {
		q.txb = q.dev.txPool.Get().(*txBuffers)
		q.tx = q.txb.pkts
		q.txN = 0
	}
}

// queueTx hands the packets built so far to the transmit queue.
func (q *QP) queueTx() {
	if q.txb == nil {
		return
	}
	if q.txN == 0 {
		q.dev.putTx(q.txb)
	} else {
		q.txb.n = q.txN
		q.txq = append(q.txq, q.txb)
	}
	q.txb, q.tx, q.txN = nil, nil, 0
}

// transmit sends the queued packets. The caller holds q.mu; it is
// released during each send, so that the receive loop can process this
// QP's ACKs while the system call runs. Only one goroutine sends for a QP
// at a time (the others leave their packets queued for it), so packets
// leave in PSN order. Call it only where the QP's state may change
// underneath: at the end of an operation.
func (q *QP) transmit() {
	q.queueTx()
	if q.txSending {
		return
	}
	q.txSending = true
	for len(q.txq) > 0 {
		b := q.txq[0]
		copy(q.txq, q.txq[1:])
		q.txq[len(q.txq)-1] = nil
		q.txq = q.txq[:len(q.txq)-1]
		q.mu.Unlock()
		err := q.dev.send(b.pkts[:b.n])
		q.dev.putTx(b)
		q.mu.Lock()
		if err != nil {
			q.onSendError(err)
		}
	}
	q.txSending = false
}

// onSendError handles a failure of the link to send some of the QP's
// packets. A packet too large for the path (EMSGSIZE: the interface's MTU
// shrank below the QP's path MTU) will never pass, so the QP fails with
// that cause; any other failure is taken as a loss, which the QP's
// retries recover, and is kept as the cause if they run out.
func (q *QP) onSendError(err error) {
	if errors.Is(err, link.ErrClosed) {
		return
	}
	q.stats.add(cSendErrors, 1)
	q.sendErr = err
	if errors.Is(err, syscall.EMSGSIZE) && q.attr.State == verbs.QPSRTS {
		q.cause = fmt.Errorf("softroce: the path MTU fell below the QP's %d-byte MTU: %w", q.mtu, err)
		q.fail(q.sqHead, verbs.WCLocLenErr)
	}
}

// Cause returns why the QP moved to the error state when the reason is
// local and more specific than the completion status says (a link error),
// or nil.
func (q *QP) Cause() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cause
}

// dropTx discards packets built or queued and not yet sent.
func (q *QP) dropTx() {
	q.txN = 0
	if q.txb != nil {
		q.txb.release()
	}
	for i, b := range q.txq {
		q.dev.putTx(b)
		q.txq[i] = nil
	}
	q.txq = q.txq[:0]
}

// reset discards every queued request and returns to RESET.
func (q *QP) reset() {
	q.stopTimer()
	q.sqHead, q.sqNext, q.sqTail = 0, 0, 0
	q.rqHead, q.rqTail = 0, 0
	q.req = requesterState{}
	q.comp = completerState{}
	q.resp = responderState{}
	q.dropTx()
	keep := q.attr.State
	q.attr = verbs.QPAttr{}
	q.attr.State = keep
	q.peer = netip.AddrPort{}
	q.mtu = 0
	q.sendErr, q.cause = nil, nil
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
	if uint32(len(wr.SGL)) > q.cap.MaxSendSGE {
		return fmt.Errorf("softroce: %d SGEs, QP allows %d: %w", len(wr.SGL), q.cap.MaxSendSGE, verbs.ErrInvalidArgument)
	}
	length := sglLen(wr.SGL)
	switch wr.Opcode {
	case verbs.WRSend, verbs.WRSendWithImm, verbs.WRRDMAWrite, verbs.WRRDMAWriteWithImm, verbs.WRRDMARead:
		if length > 1<<31 {
			return fmt.Errorf("softroce: message of %d bytes exceeds 2 GiB: %w", length, verbs.ErrInvalidArgument)
		}
	case verbs.WRAtomicCmpAndSwp, verbs.WRAtomicFetchAdd:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 {
			return fmt.Errorf("softroce: atomic needs one 8-byte SGE: %w", verbs.ErrInvalidArgument)
		}
	default:
		return fmt.Errorf("softroce: send opcode %v: %w", wr.Opcode, verbs.ErrInvalidArgument)
	}
	inline := wr.Flags&verbs.SendInline != 0
	if inline {
		if length > uint64(q.cap.MaxInlineData) || wr.Opcode == verbs.WRRDMARead || wr.Opcode >= verbs.WRAtomicCmpAndSwp {
			return fmt.Errorf("softroce: inline %v of %d bytes (max %d): %w", wr.Opcode, length, q.cap.MaxInlineData, verbs.ErrInvalidArgument)
		}
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

// fail completes the send request at index failed with status, moves the
// QP to ERR and flushes everything else.
func (q *QP) fail(failed uint32, status verbs.WCStatus) {
	q.setState(verbs.QPSErr)
	q.flush(failed, status)
}

// flush completes every outstanding request with WCWRFlushErr, except the
// send request at index failed, which gets status. Error completions are
// generated whether or not the request was signaled.
func (q *QP) flush(failed uint32, status verbs.WCStatus) {
	q.stopTimer()
	q.dropTx()
	for ; q.sqHead != q.sqTail; q.sqHead++ {
		w := &q.sq[q.sqHead%uint32(len(q.sq))]
		wc := verbs.WC{WRID: w.id, Status: verbs.WCWRFlushErr, Opcode: wcOpcode(w.opcode), QPN: q.qpn}
		if q.sqHead == failed {
			wc.Status = status
		}
		q.sendCQ.push(&wc)
	}
	q.sqNext = q.sqTail
	for ; q.rqHead != q.rqTail; q.rqHead++ {
		w := &q.rq[q.rqHead%uint32(len(q.rq))]
		q.recvCQ.push(&verbs.WC{WRID: w.id, Status: verbs.WCWRFlushErr, Opcode: verbs.WCRecv, QPN: q.qpn})
	}
	q.resp.inSend, q.resp.inWrite = false, false
	q.resp.reading.active = false
}

// Close destroys the QP. It is idempotent.
func (q *QP) Close() error {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		return nil
	}
	q.closed = true
	q.flushOwedAck() // may release q.mu while it sends
	q.stopTimer()
	q.setState(verbs.QPSErr)
	q.mu.Unlock()
	d := q.dev
	d.qpMu.Lock()
	if d.qps[q.qpn] == q {
		delete(d.qps, q.qpn)
	}
	d.qpMu.Unlock()
	q.pd.refs.Add(-1)
	return nil
}

// fromPeer reports whether a packet from src may belong to this QP: the
// source IP must be the peer's, and so must the port unless the peer uses
// 4791, where RoCEv2 senders pick the source port for entropy.
func (q *QP) fromPeer(src netip.AddrPort) bool {
	if src.Addr().Unmap() != q.peer.Addr() {
		return false
	}
	return q.peer.Port() == link.RoCEv2Port || src.Port() == q.peer.Port()
}
