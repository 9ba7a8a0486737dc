package softroce

import (
	"testing"
	"time"
)

// lossAtQueue brings s to a 3 ms queue and has the next round lose lost
// packets, which halves the window; it returns the window before and
// when the round's resends went out.
func lossAtQueue(t *testing.T, s *ccSim, lost int) (before int, resentAt int64) {
	t.Helper()
	s.rounds(3, baseRTT, 0)
	queued := baseRTT + 3*time.Millisecond
	s.round(queued, 0)
	before = s.c.Cwnd()
	s.round(queued, lost)
	if s.c.Cwnd() != before/2 {
		t.Fatalf("loss at a queue: window %d, want %d", s.c.Cwnd(), before/2)
	}
	return before, s.now
}

// TestCongestionUndo: a reduction for loss is taken back once every
// resend behind it (its round's and the next round's) is reported as a
// duplicate, and not before; the window grows back by the factor it
// shrank by and the slow-start threshold returns.
func TestCongestionUndo(t *testing.T) {
	s := newCCSim(512)
	before, t1 := lossAtQueue(t, s, 5)
	ss := s.c.ssthresh
	s.round(baseRTT+3*time.Millisecond, 3) // the recovery round: 3 more resends, same reduction
	t2 := s.now
	if s.c.OnSpuriousResends(5, t1) {
		t.Fatal("undone with 3 resends unreported")
	}
	if s.c.OnSpuriousResends(2, t2) {
		t.Fatal("undone with 1 resend unreported")
	}
	after := s.c.Cwnd()
	if !s.c.OnSpuriousResends(1, t2) {
		t.Fatal("not undone with every resend reported")
	}
	// Twice the halved window, give or take the rounding of an odd one.
	if got := s.c.Cwnd(); got < 2*after || got > 2*after+1 || got < before-1 {
		t.Errorf("undone to %d, want %d or one more (the window was %d before the reduction)", got, 2*after, before)
	}
	if s.c.ssthresh <= ss {
		t.Errorf("slow-start threshold %d after the undo, want above %d", s.c.ssthresh, ss)
	}
	if s.c.OnSpuriousResends(8, t1) {
		t.Error("a reduction undone twice")
	}
}

// TestCongestionUndoRealLoss: one resend never reported twice (a real
// loss) keeps the reduction; reports about resends from before its span,
// or after it, do not count toward it.
func TestCongestionUndoRealLoss(t *testing.T) {
	s := newCCSim(512)
	_, t1 := lossAtQueue(t, s, 4)
	if s.c.OnSpuriousResends(3, t1) || s.c.OnSpuriousResends(5, t1-int64(10*time.Millisecond)) {
		t.Fatal("undone with a resend unreported")
	}
	s.round(baseRTT+3*time.Millisecond, 0) // the recovery round ends the span
	w := s.c.Cwnd()
	if s.c.OnSpuriousResends(5, s.now+int64(time.Millisecond)) {
		t.Fatal("resends after the span undid the reduction")
	}
	if s.c.Cwnd() != w {
		t.Errorf("window %d, want %d: the reduction stands", s.c.Cwnd(), w)
	}
	if !s.c.OnSpuriousResends(1, t1) {
		t.Error("the last of the reduction's resends reported twice did not undo it")
	}
}

// TestCongestionUndoKeepsLaterCuts: undoing an older reduction takes back
// its factor only; a reduction made since stands.
func TestCongestionUndoKeepsLaterCuts(t *testing.T) {
	s := newCCSim(512)
	_, t1 := lossAtQueue(t, s, 4)
	queued := baseRTT + 3*time.Millisecond
	s.round(queued, 0) // recovery round
	s.round(queued, 6) // a second reduction, for loss
	t3 := s.now
	w := s.c.Cwnd()
	if !s.c.OnSpuriousResends(4, t1) {
		t.Fatal("the first reduction was not undone")
	}
	if got := s.c.Cwnd(); got != 2*w {
		t.Errorf("window %d after undoing the first halving, want %d", got, 2*w)
	}
	if !s.c.OnSpuriousResends(6, t3) {
		t.Fatal("the second reduction was not undone")
	}
}

// TestCongestionUndoTimeout: a timeout whose resends all arrived twice
// (the acknowledgements were late, not lost) is taken back too.
func TestCongestionUndoTimeout(t *testing.T) {
	s := newCCSim(512)
	s.full(200)
	s.rounds(3, baseRTT, 0)
	w := s.c.Cwnd()
	s.c.OnTimeout(s.high)
	if s.c.Cwnd() != ccMinWindow {
		t.Fatalf("window %d after a timeout", s.c.Cwnd())
	}
	s.now += int64(time.Millisecond)
	s.c.OnRTTSample(s.now, int64(baseRTT))
	s.c.OnPacketsLost(10)
	at := s.now
	if s.c.OnSpuriousResends(9, at) {
		t.Fatal("undone with a resend unreported")
	}
	if !s.c.OnSpuriousResends(1, at) || s.c.Cwnd() != w {
		t.Fatalf("window %d after the timeout's resends all arrived twice, want %d", s.c.Cwnd(), w)
	}
}
