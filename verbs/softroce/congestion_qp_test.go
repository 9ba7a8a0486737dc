package softroce

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestCongestionControlQP: with selective repeat, a QP asked for
// congestion control paces its packets (a pacing rate in its stats) and
// moves data intact over a lossy pipe; with go-back-N (toward rxe and
// RNICs) the request is ignored: no controller, no pacing, the IBTA
// window as before.
func TestCongestionControlQP(t *testing.T) {
	for _, selective := range []bool{true, false} {
		t.Run(map[bool]string{false: "go-back-N", true: "selective"}[selective], func(t *testing.T) {
			o := pairOpts{mtu: verbs.MTU1024, bufSize: 2 << 20, timeout: 11, sendWR: 64, recvWR: 64,
				selective: selective, congestion: true}
			a, b := newPair(t, pipeLinks, pipe.Faults{Loss: 0.02, Seed: 3}, o)
			r := rand.New(rand.NewPCG(1, 2))
			const size, slots = 128 << 10, 8
			for id := uint64(1); id <= 40; id++ {
				off := int(id%slots) * size
				verbstest.FillRandom(r, a.buf[off:off+size])
				b.postRecv(id, 0, 0)
				a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, SGL: []verbs.SGE{a.sge(off, size)},
					RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
				if id < slots {
					continue
				}
				done := id - slots + 1
				expectWC(t, b.rcq, done, verbs.WCRecvRDMAWithImm, verbs.WCSuccess)
				expectWC(t, a.scq, done, verbs.WCRDMAWrite, verbs.WCSuccess)
				o := int(done%slots) * size
				if !bytes.Equal(a.buf[o:o+size], b.buf[o:o+size]) {
					t.Fatalf("WRITE %d: data differs", done)
				}
			}
			st := a.qp.Stats()
			if selective && (st.PacingRate == 0 || st.Cwnd < ccMinWindow) {
				t.Errorf("selective with congestion control: pacing rate %d B/s, cwnd %d; want paced", st.PacingRate, st.Cwnd)
			}
			a.qp.mu.Lock()
			hasCC := a.qp.comp.win.cc != nil
			a.qp.mu.Unlock()
			if !selective && (hasCC || st.PacingRate != 0 || st.Counters.CongestionEvents != 0) {
				t.Errorf("go-back-N: controller %v, pacing rate %d B/s, %d congestion events; want none", hasCC, st.PacingRate, st.Counters.CongestionEvents)
			}
			t.Logf("cwnd %d, pacing %d B/s, %d congestion events, %d resent", st.Cwnd, st.PacingRate,
				st.Counters.CongestionEvents, st.Counters.Retransmits)
		})
	}
}

// TestReorderingQP: over a path that reorders by hundreds of
// microseconds and loses nothing, resends that prove spurious teach the
// QP to wait longer, and the data arrives intact.
func TestReorderingQP(t *testing.T) {
	st, _ := reorderRun(t, pairOpts{})
	t.Logf("reordering %d, %d spurious resends, %d resent", st.Reordering, st.SpuriousResends, st.Counters.Retransmits)
	if st.SpuriousResends == 0 || st.Reordering <= reorderPackets {
		t.Errorf("reordering %d after %d spurious resends; want the threshold raised past %d", st.Reordering, st.SpuriousResends, reorderPackets)
	}
}

// TestRepairWaitsForPacer: with congestion control, the resends a
// timeout finds needed wait for the pacer as new packets do, instead of
// leaving in a burst of repairBurst whatever the window: on a 20 ms round
// trip with a window of a few dozen packets, the pacer's 1 ms bucket
// holds a few, so the first repair after the timeout resends those and
// the rest follow on its wake-ups; the data arrives intact once the path
// heals.
func TestRepairWaitsForPacer(t *testing.T) {
	o := pairOpts{selective: true, congestion: true, timeout: 16, mtu: verbs.MTU1024}
	o.defaults()
	n, la, lb := pipeNetwork(t, pipe.Faults{Delay: 10 * time.Millisecond})
	a, b := newNode(t, la, o), newNode(t, lb, o)
	connect(t, a, b, o)
	write := func(id uint64, size int) {
		a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, size)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	write(1, 16<<10) // round trips sampled: the pacer runs
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	n.SetFaults(pipe.Faults{Loss: 1})
	write(2, 64<<10)
	deadline := time.Now().Add(5 * time.Second)
	for a.qp.Stats().Counters.Timeouts == 0 && time.Now().Before(deadline) {
		time.Sleep(50 * time.Microsecond)
	}
	a.qp.mu.Lock() // the timeout's handler, and its first repair, are done
	a.qp.mu.Unlock()
	st := a.qp.Stats().Counters
	if st.Timeouts == 0 {
		t.Fatal("no timeout while every packet was lost: nothing to test")
	}
	t.Logf("at the first timeout: %d resent", st.Retransmits)
	if st.Retransmits > repairBurst/4 {
		t.Errorf("%d packets resent at the first timeout (window %d), want what the pacer's bucket holds (at most %d)", st.Retransmits, a.qp.Stats().Cwnd, repairBurst/4)
	}
	n.SetFaults(pipe.Faults{Delay: 10 * time.Millisecond})
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
}

// TestFirstFlightHeld: with congestion control, a QP's first flight, sent
// before any ACK could pace it or shrink the window, is the controller's
// initial window, not the QP's whole window: on a 20 ms round trip a
// 512 KiB WRITE puts initialWindow packets on the wire in the first
// round trip, then the rest as ACKs come.
func TestFirstFlightHeld(t *testing.T) {
	o := pairOpts{selective: true, congestion: true, mtu: verbs.MTU1024, bufSize: 1 << 20}
	o.defaults()
	n, la, lb := pipeNetwork(t, pipe.Faults{Delay: 10 * time.Millisecond})
	a, b := newNode(t, la, o), newNode(t, lb, o)
	connect(t, a, b, o)
	a.qp.mu.Lock()
	max := a.qp.comp.win.max
	a.qp.mu.Unlock()
	if max <= initialWindow {
		t.Fatalf("the QP's window is %d, not above the initial window %d: nothing to test", max, initialWindow)
	}
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 512<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	time.Sleep(5 * time.Millisecond) // half a round trip: no ACK yet
	if sent := n.Stats().Sent; sent > initialWindow {
		t.Errorf("%d packets sent before the first ACK, want at most the initial window, %d", sent, initialWindow)
	}
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
}
