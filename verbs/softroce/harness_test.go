package softroce

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// linkKind makes a connected pair of links for a test.
type linkKind struct {
	name string
	make func(t testing.TB, f pipe.Faults) (a, b link.Link)
}

var pipeLinks = linkKind{"pipe", func(t testing.TB, f pipe.Faults) (link.Link, link.Link) {
	_, a, b := pipeNetwork(t, f)
	return a, b
}}

// pipeNetwork makes a pipe network with faults f and its two endpoints,
// 192.0.2.1 and 192.0.2.2, closed when the test ends.
func pipeNetwork(t testing.TB, f pipe.Faults) (n *pipe.Network, a, b *pipe.Endpoint) {
	t.Helper()
	n = pipe.NewNetwork(f)
	t.Cleanup(func() { n.Close() })
	var err error
	a, err = n.Endpoint(netip.MustParseAddrPort("192.0.2.1:4791"))
	must(t, err)
	b, err = n.Endpoint(netip.MustParseAddrPort("192.0.2.2:4791"))
	must(t, err)
	return n, a, b
}

// extraLinks are link kinds that build-tagged test files add (dpdk_test.go)
// for the tests that run over every kind of link.
var extraLinks []linkKind

// noFaults is a pipe without fault injection.
var noFaults = pipe.Faults{}

var udpLinks = linkKind{"udp", func(t testing.TB, _ pipe.Faults) (link.Link, link.Link) {
	a, err := udp.Listen(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), StrictICRC: true})
	if err != nil {
		t.Fatal(err)
	}
	b, err := udp.Listen(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), StrictICRC: true})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	return a, b
}}

// node is one side of a test connection: a device with one QP and one
// registered buffer.
type node struct {
	t   testing.TB
	dev *Device
	pd  verbs.PD
	scq verbs.CQ
	rcq verbs.CQ
	qp  *QP
	buf []byte
	mr  verbs.MR
}

type pairOpts struct {
	mtu         verbs.MTU
	bufSize     int
	access      verbs.Access // MR and QP remote access; default all
	timeout     uint8        // local ACK timeout code; default 12 (~17 ms)
	retry       uint8        // default 7
	rnrRetry    uint8        // default 7 (forever)
	minRNR      uint8        // default 1 (10 µs)
	maxInflight int
	ackDelay    time.Duration
	fineClock   bool // Config.FineClock
	sendWR      uint32
	recvWR      uint32
	selective   bool // selective repeat on both QPs
	congestion  bool // congestion control asked for on both QPs
	ecn         bool // ECN asked for on both QPs, but for a's with ecnOffA
	ecnOffA     bool
	wide        bool // wide SACK on both QPs
	dupEcho     bool // duplicate echoes on both QPs
	holdEcho    bool // hold echoes on both QPs
	packetMTU   int  // SetPacketMTU on both QPs, but for b's with packetOffB
	packetOffB  bool
	capture     *Capture
}

func (o *pairOpts) defaults() {
	if o.mtu == 0 {
		o.mtu = verbs.MTU1024
	}
	if o.bufSize == 0 {
		o.bufSize = 1 << 20
	}
	if o.access == 0 {
		o.access = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	}
	if o.timeout == 0 {
		o.timeout = 12
	}
	if o.retry == 0 {
		o.retry = 7
	}
	if o.rnrRetry == 0 {
		o.rnrRetry = 7
	}
	if o.minRNR == 0 {
		o.minRNR = 1
	}
	if o.sendWR == 0 {
		o.sendWR = 256
	}
	if o.recvWR == 0 {
		o.recvWR = 256
	}
}

func newNode(t testing.TB, l link.Link, o pairOpts) *node {
	t.Helper()
	dev, err := Open(Config{Link: l, MaxInflight: o.maxInflight, AckDelay: o.ackDelay, Capture: o.capture, FineClock: o.fineClock})
	if err != nil {
		t.Fatal(err)
	}
	n := &node{t: t, dev: dev}
	t.Cleanup(func() { n.close() })
	if n.pd, err = dev.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if n.scq, err = dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	if n.rcq, err = dev.CreateCQ(4096); err != nil {
		t.Fatal(err)
	}
	qp, err := n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: verbs.QPCap{MaxSendWR: o.sendWR, MaxRecvWR: o.recvWR, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInlineData: 256}})
	if err != nil {
		t.Fatal(err)
	}
	n.qp = qp.(*QP)
	if n.buf, err = verbs.AllocBuffer(o.bufSize); err != nil {
		t.Fatal(err)
	}
	if n.mr, err = n.pd.RegMR(n.buf, o.access); err != nil {
		t.Fatal(err)
	}
	return n
}

func (n *node) close() {
	n.dev.Close()
	if n.buf != nil {
		verbs.FreeBuffer(n.buf)
		n.buf = nil
	}
}

// connect moves both QPs to RTS, each aimed at the other.
func connect(t testing.TB, a, b *node, o pairOpts) {
	t.Helper()
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: o.access},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, me.qp.SetSelectiveRepeat(o.selective))
		must(t, me.qp.SetCongestionControl(o.congestion))
		must(t, me.qp.SetECN(o.ecn && !(me == a && o.ecnOffA)))
		must(t, me.qp.SetWideSACK(o.wide))
		must(t, me.qp.SetDuplicateEcho(o.dupEcho))
		must(t, me.qp.SetHoldEcho(o.holdEcho))
		if !(me == b && o.packetOffB) {
			must(t, me.qp.SetPacketMTU(o.packetMTU))
		}
		pa := peer.dev.LocalAddr()
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR,
			AH:      verbs.AH{DGID: verbs.GIDFromAddr(pa.Addr()), DPort: pa.Port()},
			PathMTU: o.mtu, DestQPN: peer.qp.QPN(), RQPSN: 0xfffff0 + uint32(peer.qp.QPN()&3),
			MaxDestRdAtomic: 16, MinRNRTimer: o.minRNR},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	}
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		me := p[0]
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0xfffff0 + uint32(me.qp.QPN()&3),
			Timeout: o.timeout, RetryCnt: o.retry, RNRRetry: o.rnrRetry, MaxRdAtomic: 16},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
}

// newPair makes two connected nodes over a pair of links of kind k.
func newPair(t testing.TB, k linkKind, f pipe.Faults, o pairOpts) (*node, *node) {
	t.Helper()
	o.defaults()
	la, lb := k.make(t, f)
	a := newNode(t, la, o)
	b := newNode(t, lb, o)
	connect(t, a, b, o)
	return a, b
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// vt is the node as the shared operation suite sees it.
func (n *node) vt() *verbstest.Node {
	return &verbstest.Node{QP: n.qp, SendCQ: n.scq, RecvCQ: n.rcq, Buf: n.buf, MR: n.mr}
}

// sge names n bytes at off in the node's buffer.
func (n *node) sge(off, length int) verbs.SGE { return n.vt().SGE(off, length) }

func (n *node) postSend(wr verbs.SendWR) {
	n.t.Helper()
	n.vt().PostSend(n.t, wr)
}

func (n *node) postRecv(id uint64, off, length int) {
	n.t.Helper()
	n.vt().PostRecv(n.t, id, off, length)
}

// waitWC returns the next completion of cq, failing the test after timeout.
func waitWC(t testing.TB, cq verbs.CQ, timeout time.Duration) verbs.WC {
	t.Helper()
	return verbstest.WaitWC(t, cq, timeout)
}

// expectWC waits for a completion and checks its id, opcode and status.
func expectWC(t testing.TB, cq verbs.CQ, id uint64, op verbs.WCOpcode, st verbs.WCStatus) verbs.WC {
	t.Helper()
	return verbstest.ExpectWC(t, cq, id, op, st, wcTimeout)
}

// noWC checks that cq stays empty for a moment.
func noWC(t testing.TB, cq verbs.CQ, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	if err := cq.Wait(ctx); err == nil {
		var wc [1]verbs.WC
		cq.Poll(wc[:])
		t.Fatalf("unexpected completion %v", wc[0])
	}
}
