package softroce

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// holdRun writes 1 MiB from a to b four times over a pipe with a 1 ms
// network delay each way whose receivers hold every packet 4 ms after it
// arrived (a busy process's socket queue), with selective repeat,
// congestion control and hold echoes as o says. It returns both QPs'
// stats and a's controller's least round trip, smoothed round trip and
// host delay.
func holdRun(t *testing.T, o pairOpts) (a, b verbs.QPStats, minRTT, srtt, host time.Duration) {
	t.Helper()
	o.mtu, o.bufSize, o.timeout, o.sendWR, o.recvWR = verbs.MTU1024, 1<<20, 14, 64, 64
	o.selective, o.congestion = true, true
	qa, qb := newPair(t, pipeLinks, pipe.Faults{Delay: time.Millisecond, Hold: 4 * time.Millisecond}, o)
	for id := uint64(1); id <= 4; id++ {
		qb.postRecv(id, 0, 0)
		qa.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{qa.sge(0, 1<<20)},
			RemoteAddr: qb.mr.Addr(), RKey: qb.mr.RKey()})
		expectWC(t, qb.rcq, id, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
		expectWC(t, qa.scq, id, verbs.WCRDMAWrite, verbs.WCSuccess)
	}
	qa.qp.mu.Lock()
	cc := qa.qp.comp.win.cc.(*delayGated)
	minRTT, srtt, host = time.Duration(cc.minRTT), time.Duration(cc.srtt), time.Duration(cc.hostDelay)
	qa.qp.mu.Unlock()
	return qa.qp.Stats(), qb.qp.Stats(), minRTT, srtt, host
}

// TestHoldEchoQP: the responder echoes its holds, and the requester
// learns them and its own: of the 10 ms round trip its controller
// samples, the hosts' 8 ms. Without hold echoes (negotiated: off on both
// QPs) no echo is sent and no hold is known.
func TestHoldEchoQP(t *testing.T) {
	a, b, minRTT, srtt, host := holdRun(t, pairOpts{holdEcho: true})
	t.Logf("on: minRTT %v srtt %v host %v; B sent %d echoes, A received %d", minRTT, srtt, host, b.Counters.HoldEchoesSent, a.Counters.HoldEchoesRecv)
	if b.Counters.HoldEchoesSent == 0 || a.Counters.HoldEchoesRecv == 0 || a.Counters.HoldEchoesSent != 0 {
		t.Errorf("echoes: B sent %d, A received %d, A sent %d", b.Counters.HoldEchoesSent, a.Counters.HoldEchoesRecv, a.Counters.HoldEchoesSent)
	}
	if minRTT < 10*time.Millisecond || host < 5*time.Millisecond || host > 12*time.Millisecond || srtt < host {
		t.Errorf("minRTT %v, srtt %v, host delay %v; want the whole 10 ms and the hosts' 8 (over 5: more than either host's 4)", minRTT, srtt, host)
	}
	if a.HostDelay < 5*time.Millisecond {
		t.Errorf("Stats().HostDelay %v, want the hosts' 8 ms", a.HostDelay)
	}
	if a.SRTT < 10*time.Millisecond {
		t.Errorf("the QP's own round trip %v: the retransmission timer must keep the whole round trip", a.SRTT)
	}
	a, b, minRTT, _, host = holdRun(t, pairOpts{})
	if b.Counters.HoldEchoesSent+a.Counters.HoldEchoesRecv != 0 || host != 0 || a.HostDelay != 0 || minRTT < 10*time.Millisecond {
		t.Errorf("off: B sent %d echoes, A received %d; minRTT %v, host delay %v; want none, 10 ms and 0",
			b.Counters.HoldEchoesSent, a.Counters.HoldEchoesRecv, minRTT, host)
	}
}

// deliverHoldEcho hands a a hold echo from addr claiming a hold of us
// microseconds of request heldPSN.
func deliverHoldEcho(a *node, from netip.AddrPort, us, heldPSN uint32) {
	buf := make([]byte, wire.BTHLen+wire.HoldEchoLen, wire.BTHLen+wire.HoldEchoLen+wire.ICRCLen)
	wire.BTH(buf).Encode(&wire.BTHFields{Opcode: wire.RCHoldEcho, MigReq: true, PKey: wire.DefaultPKey, DestQP: a.qp.QPN(), PSN: 0})
	wire.HoldEcho(buf[wire.BTHLen:]).Encode(us, heldPSN)
	deliverFrom(a, from, buf)
}

// checkHoldBounds fails unless a's controller keeps its bounds whatever
// holds it was told: a window of at least ccMinWindow, at most twice the
// window (and max) in flight, and a round trip of its own.
func checkHoldBounds(t *testing.T, a *node) {
	t.Helper()
	a.qp.mu.Lock()
	cc := a.qp.comp.win.cc.(*delayGated)
	cwnd, inflight, limit, srtt := cc.cwnd, cc.Inflight(), a.qp.comp.win.cwnd, cc.srtt
	a.qp.mu.Unlock()
	if cwnd < ccMinWindow || inflight > min(2*cwnd, cc.max) || limit != inflight || srtt <= 0 {
		t.Fatalf("cwnd %d, inflight %d (the window enforces %d), srtt %v", cwnd, inflight, limit, time.Duration(srtt))
	}
}

// TestHoldEchoForged sends a requester hand-written hold echoes: holds
// of up to 2^32 µs, for PSNs it sent and did not. Whatever they claim, it
// believes no hold over a second, keeps its bounds (checkHoldBounds) and
// moves data. An echo from another address is dropped as from the wrong
// peer, and one to a QP without hold echoes is an unexpected response.
func TestHoldEchoForged(t *testing.T) {
	a, b := optionPair(t, pairOpts{selective: true, congestion: true, holdEcho: true})
	peer := b.dev.LocalAddr()
	start := a.qp.Stats().Counters
	for i, us := range []uint32{0, 1 << 31, ^uint32(0), 999_999} {
		deliverHoldEcho(a, peer, us, uint32(i))
		a.qp.mu.Lock()
		h := a.qp.hold
		a.qp.mu.Unlock()
		if want := int64(us) * 1000; h.peerValid != (want <= maxHold) || h.peerValid && (h.peer != want || h.peerPSN != uint32(i)) {
			t.Errorf("a hold of %d µs for PSN %d kept as %+v", us, i, h)
		}
	}
	deliverHoldEcho(a, netip.MustParseAddrPort("192.0.2.9:4791"), 100, 0)
	if c := a.qp.Stats().Counters; c.WrongPeer-start.WrongPeer != 1 || c.HoldEchoesRecv-start.HoldEchoesRecv != 4 {
		t.Errorf("%d echoes from the wrong peer, %d received; want 1, 4", c.WrongPeer-start.WrongPeer, c.HoldEchoesRecv-start.HoldEchoesRecv)
	}
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 64<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	checkHoldBounds(t, a)
	plain, pb := optionPair(t, pairOpts{selective: true, congestion: true})
	before := plain.qp.Stats().Counters
	deliverHoldEcho(plain, pb.dev.LocalAddr(), 5, 0)
	after := plain.qp.Stats().Counters
	if after.HoldEchoesRecv != 0 || after.UnexpectedResponses != before.UnexpectedResponses+1 {
		t.Errorf("an echo to a QP without hold echoes: %d echoes, %d unexpected responses (was %d); want 0, one more",
			after.HoldEchoesRecv, after.UnexpectedResponses, before.UnexpectedResponses)
	}
}

// FuzzHoldEcho feeds a requester with hold echoes arbitrary echoes (holds
// and PSNs) between its writes: whatever they say, it must not panic,
// must keep its bounds, and still moves data.
func FuzzHoldEcho(f *testing.F) {
	f.Add(uint32(0), uint32(0), uint32(1<<31), uint32(1))
	f.Add(uint32(^uint32(0)), uint32(wire.PSNMask), uint32(5000), uint32(2))
	f.Add(uint32(999_999), uint32(1<<23), uint32(1), uint32(3))
	f.Fuzz(func(t *testing.T, h1, p1, h2, p2 uint32) {
		a, b := optionPair(t, pairOpts{selective: true, congestion: true, holdEcho: true})
		for i, e := range [][2]uint32{{h1, p1}, {h2, p2}} {
			deliverHoldEcho(a, b.dev.LocalAddr(), e[0], e[1])
			a.postSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 16<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
			expectWC(t, a.scq, uint64(i), verbs.WCRDMAWrite, verbs.WCSuccess)
			checkHoldBounds(t, a)
		}
	})
}
