//go:build linux

package softroce

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestDeadlinesHeap checks the fine clock's heap against a sorted list:
// QPs come out soonest first, a later deadline for a waiting QP changes
// nothing, an earlier one moves it up, and each QP is in it once.
func TestDeadlinesHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	qps := make([]*QP, 50)
	for i := range qps {
		qps[i] = &QP{}
	}
	var h deadlines
	want := map[*QP]int64{}
	for round := range 200 {
		for range rng.IntN(20) {
			q := qps[rng.IntN(len(qps))]
			at := rng.Int64N(1000) + 1
			changed := h.set(q, at)
			prev, ok := want[q]
			if changed != (!ok || at < prev) {
				t.Fatalf("round %d: set(%d) over %d (waiting %v) reported %v", round, at, prev, ok, changed)
			}
			if changed {
				want[q] = at
			}
		}
		if len(h) != len(want) {
			t.Fatalf("round %d: heap holds %d QPs, want %d", round, len(h), len(want))
		}
		var ats []int64
		for _, at := range want {
			ats = append(ats, at)
		}
		slices.Sort(ats)
		for _, at := range ats[:rng.IntN(len(ats)+1)] {
			top := h[0].at
			q := h.pop()
			if top != at || want[q] != at || q.clockIdx != 0 {
				t.Fatalf("round %d: popped a QP at %d (its deadline %d, index %d), want %d", round, top, want[q], q.clockIdx, at)
			}
			delete(want, q)
		}
	}
}

// TestFineClockRunsDueQPs schedules closed QPs (which the clock runs and
// which then do nothing) and checks that each is run once, and that an
// earlier deadline scheduled after a later one is not kept waiting for it.
func TestFineClockRunsDueQPs(t *testing.T) {
	c := newFineClock()
	if c == nil {
		t.Skip("no timerfd on this system")
	}
	defer c.close()
	late, soon := &QP{closed: true}, &QP{closed: true}
	now := nanotime()
	late.mu.Lock()
	c.schedule(late, now+int64(time.Hour))
	late.mu.Unlock()
	soon.mu.Lock()
	c.schedule(soon, now+int64(time.Millisecond))
	soon.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		n, runs := len(c.waiting), c.runs
		c.mu.Unlock()
		if runs == 1 && n == 1 {
			break
		}
		if runs > 1 || time.Now().After(deadline) {
			t.Fatalf("after %v: %d QPs run, %d waiting; want the soon one run and the late one waiting", time.Since(deadline.Add(-10*time.Second)), runs, n)
		}
		time.Sleep(time.Millisecond)
	}
	if soon.clockIdx != 0 || late.clockIdx != 1 {
		t.Fatalf("heap indexes: soon %d, late %d; want 0 and 1", soon.clockIdx, late.clockIdx)
	}
}

// TestHeldAckOnFineClock: a held ACK (Config.AckDelay, 300 µs) is a near
// deadline, which the device's fine clock and not the QP's runtime timer
// releases; the requester's ACK timeout, hours away, is not put on its
// fine clock.
func TestHeldAckOnFineClock(t *testing.T) {
	o := pairOpts{ackDelay: 300 * time.Microsecond, timeout: 31, fineClock: true}
	a, b := newPair(t, pipeLinks, pipe.Faults{}, o)
	clock := b.dev.clock
	if clock == nil {
		t.Skip("no timerfd on this system")
	}
	for i := range 20 {
		a.postSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 64)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, uint64(i), verbs.WCRDMAWrite, verbs.WCSuccess)
	}
	clock.mu.Lock()
	runs := clock.runs
	clock.mu.Unlock()
	if runs < 20 {
		t.Fatalf("the responder's fine clock ran its QP %d times for 20 held ACKs", runs)
	}
	a.qp.mu.Lock()
	at := a.qp.clockAt
	a.qp.mu.Unlock()
	a.dev.clock.mu.Lock()
	waiting := len(a.dev.clock.waiting)
	a.dev.clock.mu.Unlock()
	if at != 0 || waiting != 0 {
		t.Fatalf("the requester's ACK timeout (hours) is on its fine clock: at %d, %d waiting", at, waiting)
	}
}
