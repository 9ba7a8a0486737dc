package softroce

import (
	"math"
	"testing"
	"time"
)

// TestCubicCurve: after a congestion event at 100 packets the window is
// 50 (Reno's decrease, not CUBIC's 70: cubicBeta), and the curve is back
// at 100 after K = ∛(50/C) seconds, flat there, and convex beyond
// (RFC 9438, 4.2).
func TestCubicCurve(t *testing.T) {
	var c cubic
	t0 := int64(time.Second)
	if got := c.onCongestion(100, t0); got != 50 {
		t.Fatalf("reduced to %d from 100, want 50", got)
	}
	k := math.Cbrt(50 / cubicC)
	if math.Abs(c.k-k) > 1e-9 {
		t.Fatalf("K %.3f s, want %.3f", c.k, k)
	}
	rtt := int64(20 * time.Millisecond)
	at := func(sec float64) int64 { return t0 + int64(sec*float64(time.Second)) - rtt }
	// The curve one round trip ahead, as an increase over a window that
	// has grown to 70 since (the increase is capped at half the window).
	for _, tc := range []struct {
		sec  float64
		want float64 // the curve's window at sec
	}{
		{k / 2, 100 - cubicC*math.Pow(k/2, 3)},
		{k, 100},
		{k + 1, 100 + cubicC},
	} {
		c2 := c
		got := 70 + c2.increase(70, 0, at(tc.sec), rtt)
		if math.Abs(got-tc.want) > 0.01 {
			t.Errorf("at %.2f s: target %.2f, want %.2f", tc.sec, got, tc.want)
		}
	}
	// Never more than half the window in a round trip.
	c2 := c
	if got := c2.increase(50, 0, at(k+10), rtt); got != 25 {
		t.Errorf("far past K: increase %.1f, want it capped at 25", got)
	}
}

// TestCubicFastConvergence: a flow whose window peaks lower than at the
// event before aims its curve below that peak, giving newer flows room.
func TestCubicFastConvergence(t *testing.T) {
	var c cubic
	c.onCongestion(100, 1)
	c.onCongestion(80, 2)
	if want := 80 * (1 + cubicBeta) / 2; math.Abs(c.wMax-want) > 1e-9 {
		t.Errorf("wMax %.1f after peaks of 100 then 80, want %.1f", c.wMax, want)
	}
	c.onCongestion(90, 3)
	if c.wMax != 90 {
		t.Errorf("wMax %.1f after a higher peak of 90, want 90", c.wMax)
	}
}

// TestCubicRenoFriendly: where the curve is slow (a small window, short
// round trips), the window grows as Reno's estimate does, cubicAlpha
// (about half a packet, Linux's CUBIC's) a round trip, as Linux's
// tcp_cubic does, also past the last peak.
func TestCubicRenoFriendly(t *testing.T) {
	var c cubic
	now := int64(time.Second)
	w := float64(c.onCongestion(40, now))
	rtt := int64(time.Millisecond)
	for range 20 {
		now += rtt
		w += c.increase(int(w), int(w), now, rtt)
	}
	if want := 20 + 20*cubicAlpha; math.Abs(w-want) > 1 {
		t.Errorf("after 20 round trips of 1 ms from 20: window %.1f, want about %.1f", w, want)
	}
	c.wEst, c.wMax = 50, 40 // past the peak
	if got := c.increase(50, 50, now+rtt, rtt); math.Abs(got-cubicAlpha) > 0.01 {
		t.Errorf("past the peak: Reno's estimate grows %.2f a round trip, want %.2f", got, cubicAlpha)
	}
}
