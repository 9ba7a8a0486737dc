package softroce

import (
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestRTOFloorState: the floor starts at minRTO, doubles with each
// spurious timeout up to maxRTOFloor, and halves for each rtoFloorDecay
// without one, back to minRTO.
func TestRTOFloorState(t *testing.T) {
	var f rtoFloor
	now := int64(time.Second)
	if got := f.at(now); got != minRTO {
		t.Fatalf("floor %v before any spurious timeout, want %v", time.Duration(got), time.Duration(minRTO))
	}
	for i, want := range []int64{2 * minRTO, 4 * minRTO, 8 * minRTO, 16 * minRTO, maxRTOFloor, maxRTOFloor} {
		f.spurious(now)
		if got := f.at(now); got != min(want, maxRTOFloor) {
			t.Fatalf("after %d spurious timeouts: floor %v, want %v", i+1, time.Duration(got), time.Duration(min(want, maxRTOFloor)))
		}
		now += int64(time.Millisecond)
	}
	now += rtoFloorDecay - int64(time.Millisecond)
	if got := f.at(now); got != maxRTOFloor/2 {
		t.Fatalf("one decay after the last: floor %v, want %v", time.Duration(got), time.Duration(maxRTOFloor/2))
	}
	now += 10 * rtoFloorDecay
	if got := f.at(now); got != minRTO {
		t.Fatalf("long after: floor %v, want %v", time.Duration(got), time.Duration(minRTO))
	}
	f.spurious(now)
	if got := f.at(now); got != 2*minRTO {
		t.Fatalf("a spurious timeout after the decay: floor %v, want %v", time.Duration(got), time.Duration(2*minRTO))
	}
}

// floorPair is a connected pair with selective repeat, congestion control
// and duplicate echoes over a pipe network it returns, after one WRITE
// that measured round trips (sub-millisecond: the floor sets the
// timeout).
func floorPair(t *testing.T) (a, b *node, n *pipe.Network) {
	t.Helper()
	o := pairOpts{selective: true, congestion: true, dupEcho: true, timeout: 16, mtu: verbs.MTU1024} // ~270 ms configured
	o.defaults()
	n, la, lb := pipeNetwork(t, pipe.Faults{})
	a, b = newNode(t, la, o), newNode(t, lb, o)
	connect(t, a, b, o)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 64<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	return a, b, n
}

// floorOf is a's timeout floor now.
func floorOf(a *node) int64 {
	a.qp.mu.Lock()
	defer a.qp.mu.Unlock()
	return a.qp.comp.rtoFloor.at(nanotime())
}

// TestSpuriousTimeoutRaisesFloor: a path that stalls for 20 ms (every
// packet late, none lost) makes the 2 ms timeout fire; the peer's
// duplicate echoes prove the resends spurious, the QP counts spurious
// timeouts and raises its floor. A path that loses the packets instead
// makes the timeouts real: none is counted spurious, the floor stays.
func TestSpuriousTimeoutRaisesFloor(t *testing.T) {
	a, b, n := floorPair(t)
	if f := floorOf(a); f != minRTO {
		t.Fatalf("floor %v before the stall, want %v", time.Duration(f), time.Duration(minRTO))
	}
	n.SetFaults(pipe.Faults{Delay: 20 * time.Millisecond})
	a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	n.SetFaults(pipe.Faults{})
	deadline := time.Now().Add(5 * time.Second)
	for a.qp.Stats().Counters.SpuriousTimeouts == 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond) // the echoes are 20 ms late too
	}
	st := a.qp.Stats().Counters
	t.Logf("stall: %d timeouts, %d spurious, %d resends; floor %v", st.Timeouts, st.SpuriousTimeouts, st.Retransmits, time.Duration(floorOf(a)))
	if st.Timeouts == 0 {
		t.Fatal("no timeout during a 20 ms stall: nothing to test")
	}
	if st.SpuriousTimeouts == 0 || st.SpuriousTimeouts > st.Timeouts {
		t.Fatalf("%d of %d timeouts counted spurious, want 1 to all", st.SpuriousTimeouts, st.Timeouts)
	}
	if f := floorOf(a); f <= minRTO {
		t.Fatalf("floor %v after a spurious timeout, want more than %v", time.Duration(f), time.Duration(minRTO))
	}

	a, b, n = floorPair(t)
	n.SetFaults(pipe.Faults{Loss: 1})
	a.postSend(verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 8<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	time.Sleep(20 * time.Millisecond)
	n.SetFaults(pipe.Faults{})
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	time.Sleep(50 * time.Millisecond)
	st = a.qp.Stats().Counters
	if st.Timeouts == 0 {
		t.Fatal("no timeout while every packet was lost: nothing to test")
	}
	if st.SpuriousTimeouts != 0 || floorOf(a) != minRTO {
		t.Fatalf("losses: %d of %d timeouts counted spurious, floor %v; want none and %v", st.SpuriousTimeouts, st.Timeouts, time.Duration(floorOf(a)), time.Duration(minRTO))
	}
}
