package softroce

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// reorderRun sends 4 MiB as four WRITEs with immediate over a pipe that
// jitters each packet by up to 400 µs (so reorders them), with selective
// repeat and congestion control, and duplicate echoes as o says; it
// checks the data and returns both QPs' stats.
func reorderRun(t *testing.T, o pairOpts) (a, b verbs.QPStats) {
	t.Helper()
	o.mtu, o.bufSize, o.timeout, o.sendWR, o.recvWR = verbs.MTU1024, 2<<20, 11, 64, 64
	o.selective, o.congestion = true, true
	qa, qb := newPair(t, pipeLinks, pipe.Faults{Delay: 100 * time.Microsecond, Jitter: 400 * time.Microsecond, Seed: 5}, o)
	r := rand.New(rand.NewPCG(3, 4))
	const size = 1 << 20
	for id := uint64(1); id <= 4; id++ {
		verbstest.FillRandom(r, qa.buf[:size])
		qb.postRecv(id, 0, 0)
		qa.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{qa.sge(0, size)},
			RemoteAddr: qb.mr.Addr(), RKey: qb.mr.RKey()})
		expectWC(t, qb.rcq, id, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
		expectWC(t, qa.scq, id, verbs.WCRDMAWrite, verbs.WCSuccess)
		if !bytes.Equal(qa.buf[:size], qb.buf[:size]) {
			t.Fatalf("WRITE %d: data differs", id)
		}
	}
	return qa.qp.Stats(), qb.qp.Stats()
}

// TestDuplicateEchoQP: over a path that reorders, the responder echoes
// the duplicates that spurious resends cause, the requester believes
// them (as spurious resends, raising its reordering threshold) and undoes
// the reductions they caused; with duplicate echoes off (on neither QP,
// or on one only: the option is negotiated), no echo is sent and none
// is believed.
func TestDuplicateEchoQP(t *testing.T) {
	a, b := reorderRun(t, pairOpts{dupEcho: true})
	t.Logf("A: %d resent, %d echoes, %d spurious, %d undos, reordering %d; B: %d duplicates, %d echoes sent",
		a.Counters.Retransmits, a.Counters.DupEchoesRecv, a.SpuriousResends, a.Counters.CongestionUndos, a.Reordering,
		b.Counters.Duplicates, b.Counters.DupEchoesSent)
	if b.Counters.Duplicates == 0 {
		t.Fatal("no duplicates at B: the pipe did not reorder enough to test anything")
	}
	if b.Counters.DupEchoesSent == 0 || a.Counters.DupEchoesRecv == 0 || a.Counters.DupEchoesRecv > b.Counters.DupEchoesSent {
		t.Errorf("echoes: B sent %d, A received %d", b.Counters.DupEchoesSent, a.Counters.DupEchoesRecv)
	}
	if a.SpuriousResends == 0 || a.Reordering <= reorderPackets {
		t.Errorf("%d spurious resends, reordering %d; want some, and the threshold raised", a.SpuriousResends, a.Reordering)
	}
	if a.Counters.CongestionUndos == 0 {
		t.Errorf("no reduction undone")
	}
	if a.Counters.DupEchoesSent != 0 || b.Counters.DupEchoesRecv != 0 {
		t.Errorf("A sent %d echoes, B received %d: only responders echo", a.Counters.DupEchoesSent, b.Counters.DupEchoesRecv)
	}
	for _, c := range []struct {
		name string
		o    pairOpts
	}{{"off", pairOpts{}}} {
		t.Run(c.name, func(t *testing.T) {
			a, b := reorderRun(t, c.o)
			if b.Counters.DupEchoesSent+a.Counters.DupEchoesRecv+a.Counters.CongestionUndos != 0 {
				t.Errorf("B sent %d echoes, A received %d and undid %d; want none",
					b.Counters.DupEchoesSent, a.Counters.DupEchoesRecv, a.Counters.CongestionUndos)
			}
		})
	}
}

// dupPair is a connected pair with selective repeat, congestion control
// and duplicate echoes as on says, after one WRITE.
func dupPair(t testing.TB, on bool) (a, b *node) {
	t.Helper()
	return optionPair(t, pairOpts{selective: true, congestion: true, dupEcho: on})
}

// deliverDupEcho hands a a duplicate echo from addr, as its receive loop
// would.
func deliverDupEcho(a *node, from netip.AddrPort, psn, count, dupPSN uint32) {
	buf := make([]byte, wire.BTHLen+wire.DupEchoLen, wire.BTHLen+wire.DupEchoLen+wire.ICRCLen)
	wire.BTH(buf).Encode(&wire.BTHFields{Opcode: wire.RCDuplicateEcho, MigReq: true, PKey: wire.DefaultPKey, DestQP: a.qp.QPN(), PSN: psn})
	wire.DupEcho(buf[wire.BTHLen:]).Encode(count, dupPSN)
	deliverFrom(a, from, buf)
}

// deliverFrom hands a the packet buf (BTH onward, room for the ICRC
// after it) from addr, as its receive loop would, stamped as arrived now.
func deliverFrom(a *node, from netip.AddrPort, buf []byte) {
	a.dev.rx.batch([]link.Packet{{Buf: buf, N: len(buf), Addr: from, ICRC: link.ICRCGood, Arrived: time.Now().UnixNano()}})
}

// TestDupEchoForged sends a requester hand-written duplicate echoes. A
// requester that resent nothing believes none of them, whatever count
// they carry: no spurious resend, no reduction undone, its window as it
// was. An echo from another address is dropped as from the wrong peer,
// and one to a QP without duplicate echoes is an unexpected response.
func TestDupEchoForged(t *testing.T) {
	a, b := dupPair(t, true)
	peer := b.dev.LocalAddr()
	cwnd := a.qp.Stats().Cwnd
	for _, count := range []uint32{1, 1 << 19, 1<<19 + 1<<21, 3} {
		deliverDupEcho(a, peer, 0, count, 0)
	}
	deliverDupEcho(a, netip.MustParseAddrPort("192.0.2.9:4791"), 0, 100, 0)
	st := a.qp.Stats()
	if st.SpuriousResends != 0 || st.Counters.CongestionUndos != 0 || st.Cwnd != cwnd {
		t.Errorf("after forged echoes: %d spurious resends, %d undos, cwnd %d (was %d); want none, none, unchanged",
			st.SpuriousResends, st.Counters.CongestionUndos, st.Cwnd, cwnd)
	}
	if c := st.Counters; c.WrongPeer != 1 || c.DupEchoesRecv != 4 {
		t.Errorf("%d echoes from the wrong peer, %d received; want 1, 4", c.WrongPeer, c.DupEchoesRecv)
	}
	plain, pb := dupPair(t, false)
	before := plain.qp.Stats().Counters
	deliverDupEcho(plain, pb.dev.LocalAddr(), 0, 5, 0)
	after := plain.qp.Stats().Counters
	if after.DupEchoesRecv != 0 || after.UnexpectedResponses != before.UnexpectedResponses+1 {
		t.Errorf("an echo to a QP without duplicate echoes: %d echoes, %d unexpected responses (was %d); want 0, one more",
			after.DupEchoesRecv, after.UnexpectedResponses, before.UnexpectedResponses)
	}
}

// FuzzDupEcho feeds a requester with duplicate echoes arbitrary echoes (a
// PSN, counts, the duplicate's PSN) in sequence: whatever they say, it
// must not panic, its window must stay within the controller's bounds,
// it believes no spurious resends it did not make, and it still moves
// data.
func FuzzDupEcho(f *testing.F) {
	f.Add(uint32(0), uint32(1), uint32(2), uint32(0))
	f.Add(uint32(wire.PSNMask), uint32(1<<31), uint32(0), uint32(wire.PSNMask))
	f.Add(uint32(1<<23), uint32(^uint32(0)), uint32(5), uint32(1<<23))
	f.Fuzz(func(t *testing.T, psn, c1, c2, dup uint32) {
		a, b := dupPair(t, true)
		for _, c := range []uint32{c1, c2, c1} {
			deliverDupEcho(a, b.dev.LocalAddr(), psn&wire.PSNMask, c, dup)
		}
		st := a.qp.Stats()
		if st.Cwnd < ccMinWindow || st.SpuriousResends > st.Counters.Retransmits {
			t.Fatalf("cwnd %d, %d spurious resends of %d", st.Cwnd, st.SpuriousResends, st.Counters.Retransmits)
		}
		a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 4<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	})
}
