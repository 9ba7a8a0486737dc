package softroce

import (
	"math"
	"testing"
)

// markedRound runs one round trip at the base RTT (no queue by delay) of
// which marked packets are reported CE-marked before the round's ACK.
func (s *ccSim) markedRound(marked int) {
	if marked > 0 {
		s.c.OnECNMarks(marked)
	}
	s.round(baseRTT, 0)
}

// TestECNFirstMarksHalve: alpha starts at 1 (as Linux's DCTCP), so the
// first round with marks halves the window, once: the next round answers
// for that reduction, whatever its marks, and is not cut again.
func TestECNFirstMarksHalve(t *testing.T) {
	s := newCCSim(512)
	s.full(200)
	s.markedRound(200) // every packet of the round marked
	// (The window the reduction sets is ssthresh; the ACK that ended the
	// round already grew the window past it, as after any reduction.)
	if got := s.c.ssthresh; got != 100 {
		t.Fatalf("a fully marked round with alpha 1: reduced to %d, want 100", got)
	}
	s.markedRound(100)
	if got := s.c.ssthresh; got != 100 {
		t.Fatalf("the round after a reduction reduced again, to %d", got)
	}
	if _, ev := s.c.Stats(); ev != 1 {
		t.Fatalf("%d congestion events, want 1", ev)
	}
}

// TestECNAlphaTracksShare: with a fixed share of each round's packets
// marked, alpha converges to that share (gain 1/16), and a round with
// marks cuts the window by alpha/2, not by half as a loss does.
func TestECNAlphaTracksShare(t *testing.T) {
	for _, share := range []float64{0.05, 0.2, 0.5} {
		s := newCCSim(4096)
		s.rounds(3, baseRTT, 0)
		s.full(1000)
		for range 200 {
			s.markedRound(int(math.Round(share * float64(s.c.Cwnd()))))
		}
		if a := s.c.ecn.alpha; math.Abs(a-share) > share/4+0.01 {
			t.Errorf("%v of packets marked: alpha %.3f, want about %v", share, a, share)
		}
		s.full(1000)
		s.c.hold = 0
		s.markedRound(int(share * 1000))
		want := 1000 - int(1000*s.c.ecn.alpha/2)
		if got := s.c.ssthresh; got < want-1 || got > want+1 {
			t.Errorf("%v marked: a round with marks reduced cwnd 1000 to %d, want about %d (1 - alpha/2)", share, got, want)
		}
	}
}

// TestECNNoMarksNoCut: without marks the window grows as before (the
// ECN state adds nothing), and alpha decays toward 0.
func TestECNNoMarksNoCut(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0)
	s.full(100)
	s.rounds(50, baseRTT, 0)
	if _, ev := s.c.Stats(); ev != 0 || s.c.Cwnd() <= 100 {
		t.Fatalf("no marks: cwnd %d, %d congestion events; want growth, none", s.c.Cwnd(), ev)
	}
	if a := s.c.ecn.alpha; a > 0.1 {
		t.Fatalf("alpha %.3f after 50 unmarked rounds, want near 0", a)
	}
}

// TestECNMarksOnceWithLoss: marks reported in a round that already
// reduced the window for a loss at a queue do not cut it a second time.
func TestECNMarksOnceWithLoss(t *testing.T) {
	s := newCCSim(512)
	s.rounds(3, baseRTT, 0)
	s.full(200)
	s.c.OnECNMarks(50)
	s.round(baseRTT, 150) // a third or more lost: congestion whatever the delay
	if got := s.c.ssthresh; got != 100 {
		t.Fatalf("loss and marks in one round: reduced to %d, want 100 (one halving)", got)
	}
	if _, ev := s.c.Stats(); ev != 1 {
		t.Fatalf("%d congestion events, want 1", ev)
	}
}

// TestECNMarksEndSlowStart: the first marks end slow start at once: the
// window stops doubling within the round trip they arrive in, before the
// round's end cuts it.
func TestECNMarksEndSlowStart(t *testing.T) {
	s := newCCSim(4096)
	w := s.c.Cwnd()
	if w >= s.c.ssthresh {
		t.Fatalf("not in slow start: cwnd %d, ssthresh %d", w, s.c.ssthresh)
	}
	s.c.OnECNMarks(1)
	if s.c.ssthresh != w {
		t.Fatalf("marks in slow start: ssthresh %d, want the window %d", s.c.ssthresh, w)
	}
	// Acknowledgements within the same round no longer double the window.
	s.c.OnPacketsAcked(w/2, s.high, s.high+uint32(w))
	if got := s.c.Cwnd(); got > w+w/8 {
		t.Fatalf("half a window acknowledged after the marks: cwnd %d from %d, want no slow-start growth", got, w)
	}
}
