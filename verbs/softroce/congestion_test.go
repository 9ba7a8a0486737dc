package softroce

import (
	"testing"
	"time"
)

// ccSim drives a delayGated controller one round trip at a time, without
// a network: each round sends a window, samples its round trip, reports
// the round's losses and acknowledges the window, which ends the round.
type ccSim struct {
	c    *delayGated
	now  int64
	high uint32
}

func newCCSim(max int) *ccSim {
	return &ccSim{c: newDelayGated(max, 0), now: int64(time.Second)}
}

// full sets the window to w, out of slow start.
func (s *ccSim) full(w int) { s.c.cwnd, s.c.ssthresh = w, w }

// round runs one round trip of rtt, of which lost packets are reported lost.
func (s *ccSim) round(rtt time.Duration, lost int) {
	n := s.c.Cwnd()
	s.high += uint32(n)
	s.now += int64(rtt)
	s.c.OnRTTSample(s.now, int64(rtt))
	if lost > 0 {
		s.c.OnPacketsLost(lost)
	}
	s.c.OnPacketsAcked(n, s.high-1, s.high)
}

// rounds runs n rounds of rtt, each losing a share of its window.
func (s *ccSim) rounds(n int, rtt time.Duration, share float64) {
	for range n {
		s.round(rtt, int(float64(s.c.Cwnd())*share))
	}
}

const baseRTT = 100 * time.Microsecond

// TestCongestionRandomLoss: loss without a queue is random, not
// congestion: the window shrinks by half the loss share per round trip
// and grows back, so it stays large, with no congestion event.
func TestCongestionRandomLoss(t *testing.T) {
	for _, share := range []float64{0.01, 0.05, 0.2} {
		s := newCCSim(512)
		s.rounds(200, baseRTT, share)
		_, ev := s.c.Stats()
		if s.c.Cwnd() < 256 || ev != 0 {
			t.Errorf("%v%% random loss: cwnd %d, %d congestion events; want at least 256 and none", share*100, s.c.Cwnd(), ev)
		}
	}
}

// TestCongestionLossAtQueue: a loss while a queue stands over the target
// is congestion: the window halves, once for the round that lost and not
// again for the next (whose losses were sent before the reduction).
func TestCongestionLossAtQueue(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0) // minRTT 100 µs
	queued := baseRTT + 3*time.Millisecond
	s.round(queued, 0) // the queue builds: seen at the end of the next round
	w := s.c.Cwnd()
	s.round(queued, 5)
	if got := s.c.ssthresh; got != w/2 {
		t.Fatalf("loss at a 3 ms queue: reduced to %d, want %d", got, w/2)
	}
	s.round(queued, 5)
	if got := s.c.ssthresh; got != w/2 {
		t.Fatalf("the round after a reduction reduced again, to %d", got)
	}
	if _, ev := s.c.Stats(); ev != 1 {
		t.Fatalf("%d congestion events, want 1", ev)
	}
}

// TestCongestionDelay: with no loss, a queue over the target shrinks the
// window by 0.8 × excess/delay (Swift), at most by half; a queue under
// the target does not.
func TestCongestionDelay(t *testing.T) {
	for _, tc := range []struct {
		qdelay time.Duration
		want   int // cwnd after one round at that delay, from 400
	}{
		{500 * time.Microsecond, 400},           // under the target: kept
		{2 * time.Millisecond, 400 - 400*4/10},  // 0.8 × 1/2
		{20 * time.Millisecond, 400 - 400*5/10}, // 0.8 × 19/20, capped at half
	} {
		s := newCCSim(512)
		s.rounds(2, baseRTT, 0)
		s.c.cwnd, s.c.ssthresh = 400, 400
		s.round(baseRTT+tc.qdelay, 0) // carries the sample
		s.c.cwnd, s.c.ssthresh = 400, 400
		s.high += 400
		s.c.OnPacketsAcked(0, s.high-1, s.high) // ends the round without acknowledging more
		if got := s.c.Cwnd(); got != tc.want {
			t.Errorf("queue of %v: cwnd %d, want %d", tc.qdelay, got, tc.want)
		}
	}
}

// TestCongestionGrowth: an eighth of the window per round trip with no
// queue below slowStartLimit (eight packets past it), eight packets per
// round trip while one stands under the target,
// CUBIC's growth while competing (Reno's line, about half a packet per
// round trip, early in an epoch), and doubling in slow start.
func TestCongestionGrowth(t *testing.T) {
	s := newCCSim(1 << 20)
	s.rounds(2, baseRTT, 0)
	// Added one per acknowledgement as Reno does, the increase falls a
	// little short of ai; what an earlier round left adds at most one.
	grewFrom := func(what string, from, ai int) {
		t.Helper()
		if got := s.c.Cwnd() - from; got < ai*9/10-1 || got > ai+1 {
			t.Errorf("%s: grew by %d in a round from %d, want about %d", what, got, from, ai)
		}
	}
	grew := func(what string, ai int) { t.Helper(); grewFrom(what, 800, ai) }
	s.c.cwnd, s.c.ssthresh = 400, 400
	s.round(baseRTT, 0)
	grewFrom("no queue", 400, 50)
	s.c.cwnd, s.c.ssthresh = 800, 800
	s.round(baseRTT, 0)
	grew("no queue, past slowStartLimit", delayIncrease)
	s.c.cwnd, s.c.ssthresh = 800, 800
	s.round(baseRTT+700*time.Microsecond, 0) // seen once two rounds have it
	s.c.cwnd, s.c.ssthresh = 800, 800
	s.round(baseRTT+700*time.Microsecond, 0)
	grew("a queue under the target", delayIncrease)
	s.c.cwnd, s.c.ssthresh, s.c.undrained, s.c.acked = 800, 800, competeRounds, 0
	s.c.cubic.reset()
	s.rounds(8, baseRTT+5*time.Millisecond, 0)
	if got := s.c.Cwnd() - 800; got < 3 || got > 5 {
		t.Errorf("competing, early in an epoch: grew by %d in 8 rounds from 800, want about 4 (Reno's %.2f a round)", got, cubicAlpha)
	}
	s.c.cwnd, s.c.ssthresh, s.c.undrained = 100, 800, 0
	s.round(baseRTT, 0)
	if got := s.c.Cwnd(); got != 200 {
		t.Errorf("slow start: cwnd %d after a round from 100, want 200", got)
	}
}

// TestCongestionCompete: a queue that stands although the window shrank
// is another flow's: after competeRounds the controller stops yielding to
// delay and backs off only on loss, to cubicBeta; drainRounds drained rounds in
// a row, lasting as long as it had competed, end that; fewer, or shorter,
// do not.
func TestCongestionCompete(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0)
	s.full(400)
	full := baseRTT + 5*time.Millisecond
	s.round(full, 0) // looks drained still: two rounds' least
	since := s.now   // the queue stands from the next round on
	s.rounds(competeRounds, full, 0)
	s.full(400)
	s.c.cubic.reset() // CUBIC's epoch begins at the window set here
	if !s.c.competing() {
		t.Fatalf("not competing after %d rounds at a full queue", competeRounds+1)
	}
	w := s.c.Cwnd()
	s.rounds(4, full, 0)
	if got := s.c.Cwnd(); got < w+1 || got > w+3 {
		t.Fatalf("competing, no loss: cwnd %d from %d after 4 rounds, want it to grow by about 2 (delay ignored)", got, w)
	}
	w = s.c.Cwnd()
	s.round(full, 3)
	if got, want := s.c.ssthresh, int(float64(w)*cubicBeta); got != want {
		t.Fatalf("competing, a loss: reduced to %d from %d, want %d", got, w, want)
	}
	// Fewer drained rounds in a row than drainRounds (a full round after
	// a drained one still looks drained: two rounds' least) keep it,
	// even after a queue that stood only briefly.
	short := newCCSim(512)
	short.rounds(3, baseRTT, 0)
	short.full(400)
	short.rounds(competeRounds+1, full, 0)
	short.rounds(drainRounds-2, baseRTT, 0)
	short.rounds(2, full, 0)
	if !short.c.competing() {
		t.Fatalf("%d drained rounds ended competing", drainRounds-1)
	}
	// Drained rounds for less time than the queue had stood since
	// competing began keep it, however many they are: a competitor that
	// fills queues drains a short one for a while after each of its
	// reductions.
	s.rounds(10, full, 0)
	stood := time.Duration(s.now - since)
	brief := stood - 2*time.Millisecond
	s.rounds(int(brief/baseRTT), baseRTT, 0)
	if !s.c.competing() {
		t.Fatalf("%v of drained rounds after a queue that stood for %v ended competing", brief, stood)
	}
	// As long as it stood ends it.
	s.rounds(int(4*time.Millisecond/baseRTT), baseRTT, 0)
	if s.c.competing() {
		t.Fatalf("still competing after the queue was drained for %v, longer than it stood (%v)", brief+4*time.Millisecond, stood)
	}
}

// TestCongestionCompeteEndsWithinMaxDrainWait: after a queue that stood
// for seconds, competing ends once it has been drained for maxDrainWait.
func TestCongestionCompeteEndsWithinMaxDrainWait(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0)
	s.full(400)
	full := baseRTT + 5*time.Millisecond
	s.rounds(int(5*time.Second/full), full, 0) // within minRTTWindow, so still a queue
	if !s.c.competing() {
		t.Fatal("not competing after five seconds at a full queue")
	}
	s.round(baseRTT, 0) // looks full still: two rounds' least
	drained := time.Duration(maxDrainWait) - 2*time.Millisecond
	s.rounds(int(drained/baseRTT), baseRTT, 0)
	if !s.c.competing() {
		t.Fatalf("competing ended after %v drained, less than maxDrainWait", drained)
	}
	s.rounds(int(4*time.Millisecond/baseRTT), baseRTT, 0)
	if s.c.competing() {
		t.Fatalf("still competing after %v drained", time.Duration(maxDrainWait)+2*time.Millisecond)
	}
}

// TestCongestionTimeout: a timeout collapses the window to the minimum
// with half of it as the threshold, and slow start regains that.
func TestCongestionTimeout(t *testing.T) {
	s := newCCSim(512)
	s.rounds(2, baseRTT, 0)
	s.full(512)
	s.c.OnTimeout(s.high)
	if s.c.Cwnd() != ccMinWindow || s.c.ssthresh != 256 {
		t.Fatalf("after a timeout: cwnd %d ssthresh %d, want %d and 256", s.c.Cwnd(), s.c.ssthresh, ccMinWindow)
	}
	s.rounds(7, baseRTT, 0)
	if s.c.Cwnd() < 256 {
		t.Fatalf("7 clean rounds after a timeout: cwnd %d, want at least 256", s.c.Cwnd())
	}
}

// TestCongestionMinRTT: the minimum round trip is the least of the last
// two windows of minRTTWindow, so it follows a path that got longer.
func TestCongestionMinRTT(t *testing.T) {
	s := newCCSim(512)
	s.c.OnRTTSample(s.now, int64(baseRTT))
	s.c.OnRTTSample(s.now+minRTTWindow, int64(time.Millisecond)) // a new window
	if s.c.minRTT != int64(baseRTT) {
		t.Fatalf("minRTT %v one window later, want %v", time.Duration(s.c.minRTT), baseRTT)
	}
	s.c.OnRTTSample(s.now+2*minRTTWindow, int64(time.Millisecond))
	if s.c.minRTT != int64(time.Millisecond) {
		t.Fatalf("minRTT %v two windows later, want 1ms", time.Duration(s.c.minRTT))
	}
}

// TestCongestionPacingRate: the pacer spreads the window over the round
// trip at 1.25 times.
func TestCongestionPacingRate(t *testing.T) {
	s := newCCSim(512)
	s.rounds(2, time.Millisecond, 0)
	s.full(512)
	s.round(time.Millisecond, 0)
	pps, _ := s.c.Stats()
	want := 512 / 0.001 * pacingGain
	if pps < want*0.99 || pps > want*1.01 {
		t.Fatalf("pacing rate %.0f packets/s, want %.0f", pps, want)
	}
}

// TestSendWindowDelegates: a window with a controller takes its size
// from it, and counts losses there rather than in its own rounds.
func TestSendWindowDelegates(t *testing.T) {
	w := newProportionalWindow(512, 0)
	w.cc = newDelayGated(512, 0)
	w.cc.OnRTTSample(1, int64(baseRTT))
	w.onAck(1, 0, 512)
	w.onTimeout(512)
	if w.cwnd != ccMinWindow {
		t.Fatalf("cwnd %d after a timeout, want the controller's %d", w.cwnd, ccMinWindow)
	}
	w.onResent(3)
	if w.roundLost != 0 || w.cc.(*delayGated).roundLost != 3 {
		t.Fatalf("losses counted by the window (%d), not the controller (%d)", w.roundLost, w.cc.(*delayGated).roundLost)
	}
	w.onAck(64, 64, 512)
	before := w.cwnd
	w.onResent(lossBurstMin + before) // a loss burst: the controller halves
	if got := w.cc.Cwnd(); got >= before || w.cwnd != got {
		t.Fatalf("after a loss burst: window %d, controller %d, from %d; want the halved controller's", w.cwnd, got, before)
	}
}

// TestCongestionPacingBounded: a round trip inflated by a stall does not
// space packets further apart than maxPaceInterval.
func TestCongestionPacingBounded(t *testing.T) {
	s := newCCSim(512)
	s.rounds(2, baseRTT, 0)
	s.c.OnTimeout(s.high)
	s.round(10*time.Second, 0)
	s.round(10*time.Second, 0)
	if pps, _ := s.c.Stats(); pps < float64(time.Second)/float64(maxPaceInterval)*0.99 {
		t.Fatalf("pacing %.1f packets/s after a 10 s round trip, want at least %v", pps, time.Second/time.Duration(maxPaceInterval))
	}
}

// TestCongestionStart: the first window is initialWindow, and slow start
// doubles it per round trip up to the largest, random loss or not.
func TestCongestionStart(t *testing.T) {
	s := newCCSim(512)
	if s.c.Cwnd() != initialWindow {
		t.Fatalf("first window %d, want %d", s.c.Cwnd(), initialWindow)
	}
	s.rounds(6, baseRTT, 0.05)
	if s.c.Cwnd() != slowStartLimit {
		t.Fatalf("6 rounds of slow start at 5%% random loss: cwnd %d, want slowStartLimit, %d", s.c.Cwnd(), slowStartLimit)
	}
}

// TestCongestionSlowStartLimit: the first slow start stops at
// slowStartLimit when nothing stops it sooner, and past it the window
// grows additively, by at most delayIncrease per clean round trip, up to
// its maximum; below it, a clean round trip grows it by an eighth; a
// window limit under slowStartLimit is still reached in slow start.
func TestCongestionSlowStartLimit(t *testing.T) {
	s := newCCSim(2048)
	s.rounds(4, baseRTT, 0) // 32 doubled four times
	if got := s.c.Cwnd(); got != slowStartLimit {
		t.Fatalf("4 clean rounds of slow start: cwnd %d, want %d", got, slowStartLimit)
	}
	prev := s.c.Cwnd()
	for i := range 400 {
		s.round(baseRTT, 0)
		got := s.c.Cwnd()
		if got < prev || got > prev+delayIncrease {
			t.Fatalf("clean round %d after slow start: cwnd %d after %d, want growth of at most %d", i, got, prev, delayIncrease)
		}
		prev = got
	}
	if prev != 2048 {
		t.Fatalf("400 clean rounds after slow start: cwnd %d, want the maximum, 2048", prev)
	}
	below := newCCSim(2048)
	below.full(320)
	below.rounds(2, baseRTT, 0)
	if got := below.c.Cwnd(); got < 395 {
		t.Fatalf("2 clean rounds from 320 after slow start: cwnd %d, want an eighth more per round (405)", got)
	}
	small := newCCSim(300)
	small.rounds(4, baseRTT, 0)
	if got := small.c.Cwnd(); got != 300 {
		t.Fatalf("4 clean rounds of slow start with a window limit of 300: cwnd %d, want 300", got)
	}
}

// TestCongestionStandingQueueFloor: a queue that stands while the window
// shrinks, and the delivery rate with it, is not this flow's; delay stops
// shrinking the window once the rate has halved, so the flow starts to
// compete with a quarter to a half of its window, not with the least.
func TestCongestionStandingQueueFloor(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0)
	s.full(400)
	full := baseRTT + 5*time.Millisecond
	least := s.c.Cwnd()
	for range competeRounds + 2 {
		s.round(full, 0)
		least = min(least, s.c.Cwnd())
	}
	if !s.c.competing() {
		t.Fatalf("not competing after %d rounds at a standing queue", competeRounds+2)
	}
	if least < 100 {
		t.Fatalf("the window fell to %d at a queue it could not drain, want at least 100 (a quarter of 400)", least)
	}
}

// TestCongestionDelayIncreaseSmallPath: while a queue stands under the
// target, the window grows by at most a quarter of the packets the target
// queue holds at the flow's rate: on a slow path (12 packets per 1.2 ms,
// 100 Mbit/s) that is 2 packets per round trip, not delayIncrease, which
// would fill half of a 2 ms queue per round trip.
func TestCongestionDelayIncreaseSmallPath(t *testing.T) {
	for _, tc := range []struct {
		name    string
		base    time.Duration
		cwnd    int
		atLeast int
		atMost  int
	}{
		{"100 Mbit/s, 2 ms queue", 250 * time.Microsecond, 12, 1, 3},
		{"datacenter, a window of 800", baseRTT, 800, delayIncrease - 1, delayIncrease + 1},
	} {
		s := newCCSim(1 << 20)
		s.rounds(30, tc.base, 0)
		queued := tc.base + 700*time.Microsecond // under the 1 ms target, over half of it
		s.full(tc.cwnd)
		s.round(queued, 0)
		s.full(tc.cwnd)
		s.round(queued, 0)
		s.full(tc.cwnd)
		s.round(queued, 0)
		if got := s.c.Cwnd() - tc.cwnd; got < tc.atLeast || got > tc.atMost {
			t.Errorf("%s: grew by %d in a round from %d, want %d to %d", tc.name, got, tc.cwnd, tc.atLeast, tc.atMost)
		}
	}
}

// TestCongestionOwnQueueDrains: a flow alone on a slow link (100 Mbit/s,
// 8.3 packets per ms, 121 µs of base round trip) whose window overshot
// stands behind its own queue; its delivery rate holds while the window
// shrinks, so delay shrinks it until the queue is under the target, and
// the flow never takes its own queue for another's.
func TestCongestionOwnQueueDrains(t *testing.T) {
	const perMs = 8.3
	base := 121 * time.Microsecond
	s := newCCSim(512)
	// A round trip at the link: the base, and the queue of the window
	// past what the base holds.
	link := func() {
		queue := max(float64(s.c.Cwnd())/perMs-float64(base)/float64(time.Millisecond), 0)
		s.round(base+time.Duration(queue*float64(time.Millisecond)), 0)
	}
	s.full(1)
	link()
	link()
	s.full(40)
	for range 3 * competeRounds {
		link()
		if s.c.competing() {
			t.Fatalf("competing with its own queue at a window of %d", s.c.Cwnd())
		}
	}
	// The target queue (1 ms) and the base round trip hold 9.3 packets.
	if got := s.c.Cwnd(); got > 14 {
		t.Fatalf("window %d after %d rounds behind its own queue, want at most 14", got, 3*competeRounds)
	}
}

// TestCongestionOwnQueueLags: the same link, with the flow starting in
// slow start from an empty queue, each round's round trip showing the
// queue of the window before it, and a round lasting as long as the link
// takes to deliver its window. In slow start the window doubles within a
// round, so cwnd over the round trip overstated the rate (by 4 times
// here) when the queue began to stand, the rate seemed to halve at once,
// and delay stopped shrinking the window: the flow took its own queue for
// another's (at 100 Mbit/s with a 20 ms queue, a flow alone competed from
// its first 0.1 s and probed into a loss of 480 packets). The rate is
// what the round delivered when that is less.
func TestCongestionOwnQueueLags(t *testing.T) {
	const perMs = 8.3
	base := 121 * time.Microsecond
	s := newCCSim(512)
	s.c.pathRTT = int64(base)
	prev := 0
	for range 4 * competeRounds {
		queue := max(float64(prev)/perMs-float64(base)/float64(time.Millisecond), 0)
		rtt := base + time.Duration(queue*float64(time.Millisecond))
		prev = s.c.Cwnd()
		s.roundOver(rtt, max(rtt, time.Duration(float64(prev)/perMs*float64(time.Millisecond))), 1)
		if s.c.competing() {
			t.Fatalf("competing with its own queue at a window of %d", s.c.Cwnd())
		}
	}
	if got := s.c.Cwnd(); got > 20 {
		t.Fatalf("window %d after %d rounds behind its own queue, want at most 20", got, 4*competeRounds)
	}
}

// TestCongestionHeavyLoss: a round that loses a third of its packets or
// more is congestion even when the delay shows no queue (a minimum round
// trip taken behind a queue hides it): the window halves and slow start
// ends. A fifth, as random loss may, is not (TestCongestionRandomLoss).
func TestCongestionHeavyLoss(t *testing.T) {
	for _, tc := range []struct {
		share  float64
		halved bool
	}{
		{0.2, false},
		{0.3, false},
		{0.34, true},
		{0.6, true},
	} {
		s := newCCSim(512)
		s.rounds(3, 3*time.Millisecond, 0) // every sample behind the same queue
		w := s.c.Cwnd()
		// lost of the window lost, the rest acknowledged
		lost := int(float64(w) * tc.share)
		s.high += uint32(w)
		s.now += int64(3 * time.Millisecond)
		s.c.OnRTTSample(s.now, int64(3*time.Millisecond))
		s.c.OnPacketsLost(lost)
		s.c.OnPacketsAcked(w-lost, s.high-1, s.high)
		_, ev := s.c.Stats()
		if got := ev == 1 && s.c.ssthresh == w/2; got != tc.halved {
			t.Errorf("%v of a round of %d lost: ssthresh %d, %d events; halved %v, want %v", tc.share, w, s.c.ssthresh, ev, got, tc.halved)
		}
	}
}

// TestCongestionSlowStartEndsInRound: slow start ends within the round in
// which hystartSamples samples all stood behind a queue over the target,
// without waiting for the round's end; a single late sample among fast
// ones does not end it.
func TestCongestionSlowStartEndsInRound(t *testing.T) {
	s := newCCSim(4096)
	s.rounds(2, baseRTT, 0) // minRTT known; cwnd 128, still in slow start
	w := s.c.Cwnd()
	if w >= s.c.ssthresh {
		t.Fatalf("out of slow start at %d before any queue", w)
	}
	s.c.OnRTTSample(s.now, int64(baseRTT+5*time.Millisecond))
	for range hystartSamples - 2 {
		s.c.OnRTTSample(s.now, int64(baseRTT))
	}
	s.c.OnRTTSample(s.now, int64(baseRTT+5*time.Millisecond))
	if s.c.ssthresh != slowStartLimit {
		t.Fatalf("a late sample among fast ones ended slow start (ssthresh %d, want %d)", s.c.ssthresh, slowStartLimit)
	}
	s.round(baseRTT, 0) // the round ends; the next begins
	w = s.c.Cwnd()
	for range hystartSamples {
		s.c.OnRTTSample(s.now, int64(baseRTT+2*time.Millisecond))
	}
	if s.c.ssthresh != w {
		t.Fatalf("%d samples 2 ms behind a queue: ssthresh %d, want slow start ended at %d", hystartSamples, s.c.ssthresh, w)
	}
	s.c.OnPacketsAcked(w/2, s.high-1, s.high-uint32(w/2))
	if got := s.c.Cwnd(); got > w+w/2/8+1 {
		t.Errorf("after slow start ended mid-round: cwnd %d from %d, want congestion avoidance's growth, not doubling", got, w)
	}
}

// TestCongestionPathRTT: a flow whose every sample stands behind another
// flow's 5 ms queue takes the queue for the path and never competes,
// unless the path's round trip measured by other means (SetPathRTT: the
// handshake's TCP connection) bounds its minimum: then the queue counts
// as one, and after competeRounds it competes.
func TestCongestionPathRTT(t *testing.T) {
	for _, hint := range []time.Duration{0, baseRTT} {
		s := newCCSim(512)
		s.c.pathRTT = int64(hint)
		s.full(100)
		s.rounds(competeRounds+3, 5*time.Millisecond, 0)
		if got, want := s.c.competing(), hint != 0; got != want {
			t.Errorf("path RTT %v: competing %v after %d rounds at 5 ms (qdelay %v), want %v",
				hint, got, competeRounds+3, time.Duration(s.c.qdelay), want)
		}
	}
}

// TestCongestionLossBurst: a round that resends a whole window before it
// ends (the cumulative ACK stuck behind resends that are lost too) halves
// the window at once, and again for each further window of resends, while
// slow start's growth on the ACKs that do come would otherwise go on;
// resends at 20% loss within a round that lasts do not.
func TestCongestionLossBurst(t *testing.T) {
	s := newCCSim(4096)
	s.rounds(2, baseRTT, 0) // cwnd 128, in slow start
	w := s.c.Cwnd()
	// The round does not end: a few ACKs come, and resends pile up.
	s.c.OnPacketsAcked(10, s.high-uint32(w), s.high)
	w = s.c.Cwnd()
	s.c.OnPacketsLost(w - 1)
	if got := s.c.Cwnd(); got != w {
		t.Fatalf("fewer resends than the window within a round: cwnd %d, want %d", got, w)
	}
	s.c.OnPacketsLost(1)
	if got := s.c.Cwnd(); got != w/2 {
		t.Fatalf("a window of resends within a round: cwnd %d, want half of %d", got, w)
	}
	if s.c.ssthresh != s.c.Cwnd() {
		t.Fatalf("after a loss burst: ssthresh %d, want slow start ended at %d", s.c.ssthresh, s.c.Cwnd())
	}
	half := s.c.Cwnd()
	s.c.OnPacketsLost(half - 1)
	if got := s.c.Cwnd(); got != half {
		t.Fatalf("fewer resends than the halved window: cwnd %d, want %d", got, half)
	}
	s.c.OnPacketsLost(1)
	if got := s.c.Cwnd(); got != half/2 {
		t.Fatalf("a second window of resends: cwnd %d, want %d", got, half/2)
	}

	// While competing, the burst restarts CUBIC's curve: after an epoch
	// that began 10 s ago, the curve stands past its peak, and grows the
	// halved window by half of itself in a round trip unless it restarts.
	k := newCCSim(4096)
	k.rounds(2, baseRTT, 0)
	k.full(400)
	k.c.undrained = competeRounds
	k.c.cubic.onCongestion(800, k.now)
	k.now += int64(10 * time.Second)
	k.c.OnRTTSample(k.now, int64(baseRTT+5*time.Millisecond))
	k.c.roundEnd = psnAdd(k.high, 1000) // the round goes on throughout
	k.c.OnPacketsLost(400)
	if got := k.c.Cwnd(); got != 200 {
		t.Fatalf("competing, a window of resends: cwnd %d, want 200", got)
	}
	for range 20 {
		k.now += int64(time.Millisecond / 4)
		k.c.OnRTTSample(k.now, int64(baseRTT+5*time.Millisecond))
		k.c.OnPacketsAcked(10, k.high-1, k.high)
	}
	if got := k.c.Cwnd(); got > 202 {
		t.Fatalf("competing, a window acknowledged after a loss burst: cwnd %d from 200, want Reno's growth, about half a packet", got)
	}

	// 20% loss, in a round that lasts three rounds' worth of ACKs.
	r := newCCSim(4096)
	r.rounds(2, baseRTT, 0)
	r.full(200)
	for range 3 {
		r.c.OnPacketsLost(40)
		r.c.OnPacketsAcked(160, r.high-100, r.high)
	}
	if _, ev := r.c.Stats(); ev != 0 || r.c.Cwnd() < 200 {
		t.Fatalf("20%% loss in a long round: cwnd %d, %d congestion events; want 200 or more and none", r.c.Cwnd(), ev)
	}
}

// TestCongestionPacingFollowsRound: the pacer spreads the window over the
// round in progress's least round trip once it has hystartSamples
// samples and that is longer than the last rounds' (a round without
// end, during a loss storm, kept a queue-free minimum of two rounds ago).
func TestCongestionPacingFollowsRound(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0)
	s.full(200)
	s.round(baseRTT, 0)
	fast, _ := s.c.Stats()
	queued := baseRTT + 7*time.Millisecond
	for range hystartSamples - 1 {
		s.c.OnRTTSample(s.now, int64(queued))
	}
	if pps, _ := s.c.Stats(); pps < fast/2 {
		t.Fatalf("%d samples behind a queue: pacing %.0f packets/s from %.0f, want unchanged until %d", hystartSamples-1, pps, fast, hystartSamples)
	}
	s.c.OnRTTSample(s.now, int64(queued))
	pps, _ := s.c.Stats()
	// The smoothed round trip, still catching up, is now the shorter.
	if want := float64(s.c.Cwnd()) / time.Duration(s.c.srtt).Seconds() * pacingGain; pps > want*1.05 {
		t.Fatalf("%d samples 7 ms behind a queue: pacing %.0f packets/s, want about %.0f (the window over the smoothed round trip, %v)", hystartSamples, pps, want, time.Duration(s.c.srtt))
	}
}

// TestCongestionCompeteProbes: a flow whose window shrank for delay alone
// behind a queue that turns out to be another flow's takes those
// decreases back when it begins to compete, and probes in slow start
// until its first loss; one that lost packets while the queue stood
// competes from where it is.
func TestCongestionCompeteProbes(t *testing.T) {
	for _, lossy := range []bool{false, true} {
		s := newCCSim(4096)
		s.c.pathRTT = int64(baseRTT)
		s.rounds(2, baseRTT, 0)
		s.full(64)
		full := baseRTT + 5*time.Millisecond
		s.round(full, 0) // looks drained still: two rounds' least
		for i := range competeRounds {
			lost := 0
			if lossy && i == 2 {
				lost = 1
			}
			s.round(full, lost)
		}
		if !s.c.competing() {
			t.Fatalf("lossy %v: not competing after %d rounds behind a 5 ms queue", lossy, competeRounds+1)
		}
		w := s.c.Cwnd()
		if !lossy && (w < 64 || s.c.ssthresh < slowStartLimit) {
			t.Fatalf("competing after delay decreases alone: cwnd %d, ssthresh %d; want the window of 64 back and slow start up to %d", w, s.c.ssthresh, slowStartLimit)
		}
		if lossy && (w >= 64 || s.c.ssthresh > w) {
			t.Fatalf("competing after a loss behind the queue: cwnd %d, ssthresh %d; want the shrunk window, out of slow start", w, s.c.ssthresh)
		}
		s.rounds(2, full, 0)
		// The probe grows by a quarter per round trip (1.25² = 1.56 in
		// two), not doubles; competing without it, along CUBIC's flat
		// start, by a packet or so.
		grew := s.c.Cwnd() >= w*3/2
		if grew == lossy {
			t.Errorf("lossy %v: 2 rounds of competing from %d: cwnd %d; probing %v, want %v", lossy, w, s.c.Cwnd(), grew, !lossy)
		}
		if !lossy && s.c.Cwnd() > w*165/100 {
			t.Errorf("2 rounds of the probe from %d: cwnd %d, want a quarter's growth per round trip (%d), not slow start's doubling", w, s.c.Cwnd(), w*25/16)
		}
	}
}

// TestCongestionProbeGrowth: the probe grows by a quarter of the packets
// acknowledged however they are acknowledged, one at a time or a window
// at once; slow start after a timeout, with no probe, doubles.
func TestCongestionProbeGrowth(t *testing.T) {
	for _, per := range []int{1, 3, 64} {
		s := newCCSim(4096)
		s.full(64)
		s.c.probeQueue = int64(5 * time.Millisecond)
		s.c.ssthresh = slowStartLimit
		acked := 0
		for ; acked < 400; acked += per {
			s.high += uint32(per)
			s.c.OnPacketsAcked(per, s.high-1, s.high+64)
		}
		if want := 64 + acked/probeGrowthDivisor; s.c.cwnd != want {
			t.Errorf("probe, %d packets acknowledged %d at a time from 64: cwnd %d, want %d", acked, per, s.c.cwnd, want)
		}
	}
	s := newCCSim(4096)
	s.full(64)
	s.c.OnTimeout(s.high)
	s.c.ssthresh = slowStartLimit
	s.high += 32
	s.c.OnPacketsAcked(32, s.high-1, s.high+64)
	if want := ccMinWindow + 32; s.c.cwnd != want {
		t.Errorf("slow start after a timeout, 32 acknowledged from %d: cwnd %d, want %d", ccMinWindow, s.c.cwnd, want)
	}
}

// sampledRound runs one round trip of rtt in which n packets are sampled,
// with no loss: HyStart needs hystartSamples in a round.
func (s *ccSim) sampledRound(rtt time.Duration, n int) { s.roundOver(rtt, rtt, n) }

// roundOver runs one round that lasts elapsed, acknowledges the window,
// and samples a round trip of rtt n times, with no loss.
func (s *ccSim) roundOver(rtt, elapsed time.Duration, n int) {
	w := s.c.Cwnd()
	s.high += uint32(w)
	s.now += int64(elapsed)
	for range n {
		s.c.OnRTTSample(s.now, int64(rtt))
	}
	s.c.OnPacketsAcked(w, s.high-1, s.high)
}

// TestCongestionProbeEnds: the probe with which competing begins is a
// slow start on top of the queue it began behind: HyStart ends it once
// the round's samples stand a target over that queue, not over the path's
// minimum (which they did all along). Slow start after a timeout while
// competing is not ended by a queue at all: another flow keeps it full.
func TestCongestionProbeEnds(t *testing.T) {
	s := newCCSim(4096)
	s.c.pathRTT = int64(baseRTT)
	s.rounds(2, baseRTT, 0)
	s.full(64)
	full := baseRTT + 5*time.Millisecond
	s.rounds(competeRounds+1, full, 0)
	if !s.c.competing() || s.c.cwnd >= s.c.ssthresh {
		t.Fatalf("not probing after %d rounds behind a 5 ms queue: competing %v, cwnd %d, ssthresh %d", competeRounds+1, s.c.competing(), s.c.cwnd, s.c.ssthresh)
	}
	s.sampledRound(full, 2*hystartSamples)
	if s.c.cwnd >= s.c.ssthresh {
		t.Fatalf("probe ended behind the queue it began behind: cwnd %d, ssthresh %d", s.c.cwnd, s.c.ssthresh)
	}
	grown := full + 2*time.Millisecond // over the entry queue by more than the target
	s.sampledRound(grown, 2*hystartSamples)
	if s.c.ssthresh != s.c.cwnd || s.c.ssthresh >= slowStartLimit {
		t.Fatalf("probe went on with its own queue 2 ms over the one it began behind: cwnd %d, ssthresh %d", s.c.cwnd, s.c.ssthresh)
	}
	// A round with fewer samples than HyStart waits for: the least of
	// two rounds ends the probe at the round's end.
	few := newCCSim(4096)
	few.c.pathRTT = int64(baseRTT)
	few.rounds(2, baseRTT, 0)
	few.full(64)
	few.rounds(competeRounds+1, full, 0)
	few.rounds(1, full, 0)
	if few.c.cwnd >= few.c.ssthresh {
		t.Fatalf("probe ended behind the queue it began behind, one sample a round: cwnd %d, ssthresh %d", few.c.cwnd, few.c.ssthresh)
	}
	few.rounds(2, grown, 0)
	if few.c.ssthresh >= slowStartLimit || few.c.cwnd > few.c.ssthresh+2 {
		t.Fatalf("probe went on, one sample a round, its own queue 2 ms over the one it began behind: cwnd %d, ssthresh %d", few.c.cwnd, few.c.ssthresh)
	}
	w := s.c.Cwnd()
	s.c.OnTimeout(s.high)
	if !s.c.competing() {
		t.Fatal("a timeout ended competing")
	}
	s.sampledRound(grown, 2*hystartSamples)
	if s.c.ssthresh != max(w/2, ccMinWindow) || s.c.cwnd >= s.c.ssthresh {
		t.Fatalf("slow start after a timeout while competing: cwnd %d, ssthresh %d; want slow start on toward %d", s.c.cwnd, s.c.ssthresh, max(w/2, ccMinWindow))
	}
}

// TestCongestionCompeteTakesRoundTrips: the switch to competing waits for
// competeRounds round trips in time as well as in rounds: rounds that
// last half a round trip (a small window, stalls between sends) must not
// make a queue that stood for 6 round trips another flow's.
func TestCongestionCompeteTakesRoundTrips(t *testing.T) {
	s := newCCSim(512)
	s.c.pathRTT = int64(baseRTT)
	s.rounds(3, baseRTT, 0)
	s.full(64)
	rtt := baseRTT + 5*time.Millisecond
	halfRound := func() { s.roundOver(rtt, rtt/2, 1) }
	for range 8 {
		halfRound() // srtt settles at the round trip
	}
	for range competeRounds + 1 {
		s.full(64)
		halfRound()
	}
	if s.c.competing() {
		t.Fatalf("competing after %d rounds of half a round trip each", competeRounds+9)
	}
	for range 2 * competeRounds {
		halfRound()
	}
	if !s.c.competing() {
		t.Fatalf("not competing after a queue stood for more than %d round trips", competeRounds)
	}
}

// TestCongestionHostDelay: while competing, the packets the hosts hold
// are in flight beyond the window, in proportion to the hosts' share of
// the round trip over the network's, up to twice the window and never
// past max; without a host delay, or yielding to delay, the window alone.
// The round trip keeps the hosts' holds. networkRTT keeps at least an
// eighth of a sample, however long the hold it is told.
func TestCongestionHostDelay(t *testing.T) {
	for _, c := range []struct {
		host      int64 // host delay in µs, of a round trip of 2 ms plus it
		competing bool
		want      int // Inflight for a 100-packet window
	}{{0, true, 100}, {500, true, 125}, {2000, true, 200}, {9000, true, 200}, {2000, false, 100}} {
		cc := newDelayGated(2048, 0)
		cc.cwnd = 100
		if c.competing {
			cc.undrained = competeRounds
		}
		rtt := 2*int64(time.Millisecond) + c.host*1000
		for range 50 {
			cc.OnHostDelay(c.host * 1000)
			cc.OnRTTSample(int64(time.Second), rtt)
		}
		if got := cc.Inflight(); got != c.want || cc.srtt != rtt {
			t.Errorf("host delay %d µs, competing %v: Inflight %d, srtt %v; want %d and %v", c.host, c.competing, got, time.Duration(cc.srtt), c.want, time.Duration(rtt))
		}
	}
	cc := newDelayGated(150, 0)
	cc.cwnd, cc.undrained = 100, competeRounds
	cc.OnHostDelay(int64(time.Millisecond))
	cc.OnRTTSample(int64(time.Second), 2*int64(time.Millisecond))
	if got := cc.Inflight(); got != 150 {
		t.Errorf("Inflight %d past max 150", got)
	}
	for _, c := range []struct{ rtt, host, want int64 }{{1000, 300, 700}, {1000, 0, 1000}, {1000, -5, 1000}, {1000, 990, 125}, {1000, 5000, 125}} {
		if got := networkRTT(c.rtt, c.host); got != c.want {
			t.Errorf("networkRTT(%d, %d) = %d, want %d", c.rtt, c.host, got, c.want)
		}
	}
}
