package softroce

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
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
	mtu       uint32 // payload bytes per packet: the path MTU's, or packetMTU
	packetMTU uint32 // the negotiated payload per packet (SetPacketMTU); 0 none
	selective bool   // selective repeat negotiated (SetSelectiveRepeat)
	wide      bool   // wide SACK negotiated (SetWideSACK, widesack.go)
	// windowLimit bounds the send window when not 0 (SetSendWindowLimit).
	windowLimit int
	sendErr     error // the last error of the link's Send for this QP
	cause       error // why the QP went to ERR, when the reason is local

	// Congestion control (congestion_qp.go): negotiated
	// (SetCongestionControl); when the pacer lets the next packet go (0:
	// not waiting); the controller's events already counted.
	congestion bool
	paceAt     int64
	ccEvents   uint64
	pathRTT    int64 // the round trip measured by other means (SetPathRTT), ns; 0 none

	// ECN (ecn_qp.go): negotiated (SetECN), and its counts.
	ecn       bool
	ecnCounts ecnState

	// Duplicate echoes (dupecho_qp.go): negotiated (SetDuplicateEcho),
	// and their counts.
	dupEcho   bool
	dupCounts dupState

	// Hold echoes (holdecho_qp.go): negotiated (SetHoldEcho), and the
	// arrival times they are measured from.
	holdEcho bool
	hold     holdState

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
	// clockAt is the deadline the device's fine clock holds for the QP
	// (fineclock.go), or 0.
	clockAt int64
	// clockIdx is the QP's place in the fine clock's heap, guarded by the
	// clock's lock (1-based; 0: not in it).
	clockIdx int
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
	a.Apply(attr, mask)
	if mask&verbs.AttrAV != 0 {
		port := attr.AH.DPort
		if port == 0 {
			port = link.RoCEv2Port
		}
		q.peer = netip.AddrPortFrom(attr.AH.DGID.Addr(), port)
	}
	if mask&verbs.AttrPathMTU != 0 {
		q.mtu = q.mtuFor(attr.PathMTU)
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
				win: newSendWindow(windowFor(0, q.dev.maxInflight, 0), a.SQPSN)}
			if q.selective {
				sack := q.sackBytes()
				win := windowFor(sack, q.dev.maxInflight, q.windowLimit)
				q.comp.sack = sack
				q.comp.sb = growScoreboard(scoreboardSize(win, sack))
				q.comp.win = newProportionalWindow(win, a.SQPSN)
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

// setOption sets the option *opt, a field of q, to on; options are set
// before the QP is ready to send: in RESET, INIT or RTR.
func (q *QP) setOption(opt *bool, on bool) error { return setBeforeRTS(q, opt, on) }

// setBeforeRTS sets *field, a field of q, to v, in RESET, INIT or RTR
// only: what the QP sends by is fixed once it may send.
func setBeforeRTS[T any](q *QP, field *T, v T) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	switch q.attr.State {
	case verbs.QPSReset, verbs.QPSInit, verbs.QPSRTR:
	default:
		return verbs.ErrInvalidState
	}
	*field = v
	return nil
}

func (q *QP) setState(s verbs.QPState) {
	q.attr.State = s
	q.state.Store(uint32(s))
}

// Cause returns why the QP moved to the error state when the reason is
// local and more specific than the completion status says (a link error),
// or nil.
func (q *QP) Cause() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.cause
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
