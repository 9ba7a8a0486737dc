package softroce

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// ecnRun moves 40 WRITEs of 128 KiB from a to b over a pipe that marks CE
// on 5% of ECN-capable packets, checks the data, and returns both QPs'
// counters and the pipe's.
func ecnRun(t *testing.T, o pairOpts) (a, b verbs.QPStats, net pipe.Stats) {
	t.Helper()
	o.mtu, o.bufSize, o.timeout, o.sendWR, o.recvWR = verbs.MTU1024, 2<<20, 11, 64, 64
	o.defaults()
	n, la, lb := pipeNetwork(t, pipe.Faults{Mark: 0.05, Seed: 5})
	na, nb := newNode(t, la, o), newNode(t, lb, o)
	connect(t, na, nb, o)
	r := rand.New(rand.NewPCG(1, 2))
	const size, slots = 128 << 10, 8
	for id := uint64(1); id <= 40; id++ {
		off := int(id%slots) * size
		verbstest.FillRandom(r, na.buf[off:off+size])
		nb.postRecv(id, 0, 0)
		na.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{na.sge(off, size)},
			RemoteAddr: nb.mr.Addr() + uint64(off), RKey: nb.mr.RKey()})
		if id < slots {
			continue
		}
		done := id - slots + 1
		expectWC(t, nb.rcq, done, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
		expectWC(t, na.scq, done, verbs.WCRDMAWrite, verbs.WCSuccess)
		o := int(done%slots) * size
		if !bytes.Equal(na.buf[o:o+size], nb.buf[o:o+size]) {
			t.Fatalf("WRITE %d: data differs", done)
		}
	}
	for done := uint64(41 - slots + 1); done <= 40; done++ {
		expectWC(t, nb.rcq, done, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
		expectWC(t, na.scq, done, verbs.WCRDMAWrite, verbs.WCSuccess)
	}
	a, b, net = na.qp.Stats(), nb.qp.Stats(), n.Stats()
	ca, cb := a.Counters, b.Counters
	t.Logf("pipe marked %d of %d; B: %d ECN-capable, %d CE, %d echoes sent; A: %d echoes, %d marks echoed, %d congestion events, cwnd %d",
		net.Marked, net.Sent, cb.ECNCapableRecv, cb.ECNCERecv, cb.ECNEchoesSent, ca.ECNEchoesRecv, ca.ECNMarksEchoed, ca.CongestionEvents, a.Cwnd)
	return a, b, net
}

// TestECNQP: with ECN on both QPs (over selective repeat and congestion
// control), every request goes out ECN-capable, the responder counts each
// CE mark the pipe set and echoes them, and the requester's controller
// hears every one of them and reduces its window. With ECN off on the
// requester's QP (rsock turns it on only where both peers offered it;
// see package rsock's TestECNNegotiated), without congestion control, or
// with go-back-N, nothing goes out ECN-capable, so nothing is marked and
// nothing echoed.
func TestECNQP(t *testing.T) {
	t.Run("negotiated", func(t *testing.T) {
		a, b, net := ecnRun(t, pairOpts{selective: true, congestion: true, ecn: true})
		ca, cb := a.Counters, b.Counters
		if cb.ECNCapableRecv == 0 || cb.ECNCapableRecv != cb.RecvPackets {
			t.Errorf("B received %d packets, %d of them ECN-capable; want all", cb.RecvPackets, cb.ECNCapableRecv)
		}
		if net.Marked == 0 || cb.ECNCERecv != net.Marked {
			t.Errorf("the pipe marked %d packets, B counted %d CE; want the same, not 0", net.Marked, cb.ECNCERecv)
		}
		if cb.ECNEchoesSent == 0 || ca.ECNEchoesRecv == 0 || ca.ECNEchoesRecv > cb.ECNEchoesSent {
			t.Errorf("echoes: B sent %d, A received %d", cb.ECNEchoesSent, ca.ECNEchoesRecv)
		}
		if ca.ECNMarksEchoed != cb.ECNCERecv {
			t.Errorf("A heard of %d marks, B counted %d (echoes are cumulative: none may be lost on a lossless pipe)", ca.ECNMarksEchoed, cb.ECNCERecv)
		}
		if ca.CongestionEvents == 0 {
			t.Error("A's controller never reduced its window for the marks")
		}
		if ca.ECNCapableRecv != 0 || cb.ECNEchoesRecv != 0 {
			t.Errorf("A received %d ECN-capable packets and B %d echoes: only requests are ECN-capable, only responders echo", ca.ECNCapableRecv, cb.ECNEchoesRecv)
		}
	})
	for _, c := range []struct {
		name string
		o    pairOpts
	}{
		{"requester-without", pairOpts{selective: true, congestion: true, ecn: true, ecnOffA: true}},
		{"no-congestion-control", pairOpts{selective: true, ecn: true}},
		{"go-back-N", pairOpts{congestion: true, ecn: true}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, b, net := ecnRun(t, c.o)
			if n := b.Counters.ECNCapableRecv + a.Counters.ECNCapableRecv; n != 0 || net.Marked != 0 {
				t.Errorf("%d packets arrived ECN-capable, %d marked; want none", n, net.Marked)
			}
			if a.Counters.ECNEchoesRecv+b.Counters.ECNEchoesSent != 0 {
				t.Errorf("echoes: B sent %d, A received %d; want none", b.Counters.ECNEchoesSent, a.Counters.ECNEchoesRecv)
			}
		})
	}
}

// ecnPair is a connected pair with selective repeat, congestion control
// and ECN on both QPs (ecn false: ECN off on both), after one WRITE.
func ecnPair(t testing.TB, ecn bool) (a, b *node) {
	t.Helper()
	return optionPair(t, pairOpts{selective: true, congestion: true, ecn: ecn})
}

// optionPair is a pair connected over a clean pipe with the options o,
// after one WRITE.
func optionPair(t testing.TB, o pairOpts) (a, b *node) {
	t.Helper()
	o.defaults()
	_, la, lb := pipeNetwork(t, pipe.Faults{})
	a, b = newNode(t, la, o), newNode(t, lb, o)
	connect(t, a, b, o)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	return a, b
}

// deliverEcho hands a an ECN echo from addr, as its receive loop would.
func deliverEcho(a *node, from netip.AddrPort, psn, ect, ce uint32) {
	buf := make([]byte, wire.BTHLen+wire.ECNEchoLen, wire.BTHLen+wire.ECNEchoLen+wire.ICRCLen)
	wire.BTH(buf).Encode(&wire.BTHFields{Opcode: wire.RCECNEcho, MigReq: true, PKey: wire.DefaultPKey, DestQP: a.qp.QPN(), PSN: psn})
	wire.ECNEcho(buf[wire.BTHLen:]).Encode(ect, ce)
	a.dev.rx.batch([]link.Packet{{Buf: buf, N: len(buf), Addr: from, ICRC: link.ICRCGood}})
}

// TestECNEchoForged sends a requester hand-written echoes: the marks it
// believes are the new ones of each echo from its peer; an echo behind the
// last (reordered, or replayed), one implausibly far ahead, one from
// another address, and any echo to a QP without ECN move nothing.
func TestECNEchoForged(t *testing.T) {
	a, b := ecnPair(t, true)
	peer := b.dev.LocalAddr()
	marks := func() uint64 { return a.qp.Stats().Counters.ECNMarksEchoed }
	steps := []struct {
		name  string
		from  netip.AddrPort
		ce    uint32
		total uint64
	}{
		{"first", peer, 10, 10},
		{"behind", peer, 5, 10},
		{"replayed", peer, 10, 10},
		{"far ahead", peer, 10 + 1<<21, 10},
		{"wrong peer", netip.MustParseAddrPort("192.0.2.9:4791"), 30, 10},
		{"next", peer, 20, 20},
		{"wrapped", peer, 20 + 1<<20, 20 + 1<<20},
	}
	for _, s := range steps {
		deliverEcho(a, s.from, 0, 1000, s.ce)
		if got := marks(); got != s.total {
			t.Fatalf("%s echo (CE %d): %d marks echoed in all, want %d", s.name, s.ce, got, s.total)
		}
	}
	if c := a.qp.Stats().Counters; c.WrongPeer != 1 || c.ECNEchoesRecv != 6 {
		t.Errorf("%d echoes from the wrong peer, %d received; want 1, 6", c.WrongPeer, c.ECNEchoesRecv)
	}
	plain, pb := ecnPair(t, false)
	before := plain.qp.Stats().Counters
	deliverEcho(plain, pb.dev.LocalAddr(), 0, 1000, 500)
	after := plain.qp.Stats().Counters
	if after.ECNMarksEchoed != 0 || after.ECNEchoesRecv != 0 || after.UnexpectedResponses != before.UnexpectedResponses+1 {
		t.Errorf("an echo to a QP without ECN: %d marks, %d echoes, %d unexpected responses (was %d); want 0, 0, one more",
			after.ECNMarksEchoed, after.ECNEchoesRecv, after.UnexpectedResponses, before.UnexpectedResponses)
	}
}

// FuzzECNEcho feeds a requester with ECN arbitrary echoes (a PSN, both
// counts) in sequence: whatever they say, it must not panic, its window
// must stay at least the controller's minimum, and it believes no more
// marks per echo than maxECNDelta.
func FuzzECNEcho(f *testing.F) {
	f.Add(uint32(0), uint32(100), uint32(10), uint32(20))
	f.Add(uint32(wire.PSNMask), uint32(0), uint32(1<<31), uint32(0))
	f.Add(uint32(1<<23), uint32(^uint32(0)), uint32(^uint32(0)), uint32(1))
	f.Fuzz(func(t *testing.T, psn, ect, ce1, ce2 uint32) {
		a, b := ecnPair(t, true)
		for _, ce := range []uint32{ce1, ce2, ce1} {
			deliverEcho(a, b.dev.LocalAddr(), psn&wire.PSNMask, ect, ce)
		}
		st := a.qp.Stats()
		if st.Cwnd < ccMinWindow || st.Counters.ECNMarksEchoed > 2*maxECNDelta {
			t.Fatalf("cwnd %d, %d marks believed from 3 echoes", st.Cwnd, st.Counters.ECNMarksEchoed)
		}
		a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 4<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	})
}
