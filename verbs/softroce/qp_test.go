package softroce

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

func TestPSNArithmetic(t *testing.T) {
	cases := []struct {
		a, b uint32
		diff int32
	}{
		{0, 0, 0}, {5, 3, 2}, {3, 5, -2}, {0, 0xffffff, 1}, {0xffffff, 0, -1},
		{0x7fffff, 0, 0x7fffff}, {0x800000, 0, -0x800000}, {0x10, 0xfffff0, 0x20},
	}
	for _, c := range cases {
		if got := psnDiff(c.a, c.b); got != c.diff {
			t.Errorf("psnDiff(%#x, %#x) = %d, want %d", c.a, c.b, got, c.diff)
		}
	}
	if got := psnAdd(0xffffff, 2); got != 1 {
		t.Errorf("psnAdd wraps to %#x, want 1", got)
	}
	if got := psnAdd(5, wire.PSNMask); got != 4 {
		t.Errorf("psnAdd(5, -1) = %#x", got)
	}
}

func TestTimerCodes(t *testing.T) {
	if got := ackTimeout(14); got != 4096<<14 {
		t.Errorf("ackTimeout(14) = %d", got)
	}
	if ackTimeout(0) != 0 {
		t.Error("timeout 0 must disable the timer")
	}
	if rnrTimeout(1) != 10_000 || rnrTimeout(0) != 655_360_000 || rnrTimeout(31) != 491_520_000 {
		t.Error("RNR timer table wrong")
	}
}

// TestStateMachine checks the transitions and required attributes of
// ibv_modify_qp.
func TestStateMachine(t *testing.T) {
	la, _ := pipeLinks.make(t, pipe.Faults{})
	o := pairOpts{}
	o.defaults()
	n := newNode(t, la, o)
	qp := n.qp
	if qp.State() != verbs.QPSReset {
		t.Fatalf("new QP in %v", qp.State())
	}
	// RESET→RTR skips INIT.
	err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState)
	if !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET→RTR: %v", err)
	}
	// INIT needs port, pkey index and access flags.
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.AttrState); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("INIT without attributes: %v", err)
	}
	if _, err := qp.PostSend([]verbs.SendWR{{Opcode: verbs.WRSend}}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("post send in RESET: %v", err)
	}
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.AttrState|verbs.AttrPort|verbs.AttrPKeyIndex|verbs.AttrAccessFlags))
	// Out-of-range values are rejected.
	rtrMask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	good := verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: verbs.GIDFromAddr(netip.MustParseAddr("192.0.2.2"))},
		PathMTU: verbs.MTU1024, DestQPN: 0x12}
	for name, mutate := range map[string]func(a *verbs.QPAttr){
		"mtu":       func(a *verbs.QPAttr) { a.PathMTU = 9 },
		"dest qpn":  func(a *verbs.QPAttr) { a.DestQPN = 1 << 24 },
		"rq psn":    func(a *verbs.QPAttr) { a.RQPSN = 1 << 24 },
		"sgid":      func(a *verbs.QPAttr) { a.AH.SGIDIndex = 3 },
		"no dgid":   func(a *verbs.QPAttr) { a.AH.DGID = verbs.GID{} },
		"rnr timer": func(a *verbs.QPAttr) { a.MinRNRTimer = 32 },
	} {
		a := good
		mutate(&a)
		if err := qp.Modify(&a, rtrMask); !errors.Is(err, verbs.ErrInvalidArgument) {
			t.Errorf("%s: %v", name, err)
		}
	}
	if err := qp.Modify(&good, rtrMask&^verbs.AttrDestQPN); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RTR without dest QPN: %v", err)
	}
	must(t, qp.Modify(&good, rtrMask))
	// RTR→RTS needs the requester's attributes.
	if err := qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS}, verbs.AttrState); err == nil {
		t.Fatal("RTS without attributes accepted")
	}
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	if a := qp.Query(); a.State != verbs.QPSRTS || a.Timeout != 14 || a.DestQPN != 0x12 || a.PathMTU != verbs.MTU1024 {
		t.Fatalf("query: %+v", a)
	}
	// Any state → ERR flushes; ERR → RESET → INIT works again.
	n.postRecv(5, 0, 10)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState))
	expectWC(t, n.rcq, 5, verbs.WCRecv, verbs.WCWRFlushErr)
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
	must(t, qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1}, verbs.AttrState|verbs.AttrPort|verbs.AttrPKeyIndex|verbs.AttrAccessFlags))
	if qp.State() != verbs.QPSInit {
		t.Fatalf("state %v", qp.State())
	}
	// Close is idempotent and later calls fail cleanly.
	must(t, qp.Close())
	must(t, qp.Close())
	if _, err := qp.PostRecv([]verbs.RecvWR{{}}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("post after close: %v", err)
	}
}

func TestMRRules(t *testing.T) {
	la, _ := pipeLinks.make(t, pipe.Faults{})
	o := pairOpts{}
	o.defaults()
	n := newNode(t, la, o)
	if _, err := n.pd.RegMR(n.buf, verbs.AccessRemoteWrite); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("remote write without local write: %v", err)
	}
	if _, err := n.pd.RegMR(nil, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("empty MR: %v", err)
	}
	m1, err := n.pd.RegMR(n.buf[:100], verbs.AccessLocalWrite)
	must(t, err)
	m2, err := n.pd.RegMR(n.buf[:100], verbs.AccessLocalWrite)
	must(t, err)
	if m1.LKey() == m2.LKey() || m1.RKey() == m2.RKey() || m1.LKey() == 0 || m1.RKey() == 0 {
		t.Fatal("keys repeat or are zero")
	}
	if err := n.pd.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("PD close with MRs: %v", err)
	}
	must(t, m1.Close())
	must(t, m1.Close())
}

// TestWrongPeerDropped: packets for a QP from any address but its peer's
// are dropped and counted.
func TestWrongPeerDropped(t *testing.T) {
	net := pipe.NewNetwork(pipe.Faults{})
	defer net.Close()
	ep := func(s string) *pipe.Endpoint {
		e, err := net.Endpoint(netip.MustParseAddrPort(s))
		must(t, err)
		return e
	}
	o := pairOpts{}
	o.defaults()
	a, b, c := newNode(t, ep("192.0.2.1:4791"), o), newNode(t, ep("192.0.2.2:4791"), o), newNode(t, ep("192.0.2.3:4791"), o)
	connect(t, a, b, o)
	// c aims a QP at b's QP, which is connected to a.
	connectOneWay(t, c, b, o)
	b.postRecv(1, 0, 100)
	c.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{c.sge(0, 10)}})
	c.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{c.sge(0, 10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	noWC(t, b.rcq, 30*time.Millisecond)
	if got := b.dev.Counters().WrongPeer; got == 0 {
		t.Fatal("packets from a stranger were not counted as wrong peer")
	}
	// The real peer still gets through.
	a.postSend(verbs.SendWR{ID: 3, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 10)}})
	expectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCSuccess)
}

// connectOneWay moves me's QP to RTS aimed at peer's QP, without touching peer.
func connectOneWay(t *testing.T, me, peer *node, o pairOpts) {
	must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: o.access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	pa := peer.dev.LocalAddr()
	must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: verbs.GIDFromAddr(pa.Addr()), DPort: pa.Port()},
		PathMTU: o.mtu, DestQPN: peer.qp.QPN(), RQPSN: 0, MaxDestRdAtomic: 1, MinRNRTimer: 1},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0xfffff0 + uint32(peer.qp.QPN()&3), Timeout: 8, RetryCnt: 1, RNRRetry: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
}

// TestCloseReleases: closing a device with busy QPs stops everything
// (goleak in TestMain checks the goroutines).
func TestCloseReleases(t *testing.T) {
	a, b := newPair(t, udpLinks, pipe.Faults{}, pairOpts{})
	for i := uint64(0); i < 50; i++ {
		a.postSend(verbs.SendWR{ID: i, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 100000)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	must(t, b.dev.Close())
	must(t, a.dev.Close())
	must(t, a.dev.Close())
	if _, err := a.dev.AllocPD(); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("AllocPD after close: %v", err)
	}
	if err := a.scq.Wait(t.Context()); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("CQ wait after close: %v", err)
	}
}

// TestOptionsBeforeRTS: selective repeat and congestion control are set in
// RESET, INIT or RTR, and refused once the QP is ready to send.
func TestOptionsBeforeRTS(t *testing.T) {
	a, _ := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{})
	q := a.qp
	if q.State() != verbs.QPSRTS {
		t.Fatalf("QP in %v, want RTS", q.State())
	}
	if err := q.SetSelectiveRepeat(true); !errors.Is(err, verbs.ErrInvalidState) {
		t.Errorf("SetSelectiveRepeat in RTS: %v, want ErrInvalidState", err)
	}
	if err := q.SetCongestionControl(true); !errors.Is(err, verbs.ErrInvalidState) {
		t.Errorf("SetCongestionControl in RTS: %v, want ErrInvalidState", err)
	}
	la, _ := pipeLinks.make(t, pipe.Faults{})
	o := pairOpts{}
	o.defaults()
	r := newNode(t, la, o).qp
	for _, on := range []bool{true, false} {
		if err := r.SetSelectiveRepeat(on); err != nil || r.selective != on {
			t.Errorf("SetSelectiveRepeat(%v) in RESET: %v, selective %v", on, err, r.selective)
		}
		if err := r.SetCongestionControl(on); err != nil || r.congestion != on {
			t.Errorf("SetCongestionControl(%v) in RESET: %v, congestion %v", on, err, r.congestion)
		}
	}
}
