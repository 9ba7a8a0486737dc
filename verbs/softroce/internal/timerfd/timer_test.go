//go:build linux

package timerfd

import (
	"testing"
	"time"
)

// TestTimerFiresOnceAfterReset checks that a Timer fires once per Reset,
// not before its time, and that a later Reset replaces an earlier one.
func TestTimerFiresOnceAfterReset(t *testing.T) {
	tm, err := NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	for _, d := range []time.Duration{0, 50 * time.Microsecond, 2 * time.Millisecond} {
		start := time.Now()
		if err := tm.Reset(time.Hour); err != nil {
			t.Fatal(err)
		}
		if err := tm.Reset(d); err != nil {
			t.Fatal(err)
		}
		select {
		case <-tm.C:
		case <-time.After(10 * time.Second):
			t.Fatalf("a %v timer did not fire in 10s", d)
		}
		if took := time.Since(start); took < d {
			t.Fatalf("a %v timer fired after %v", d, took)
		}
		select {
		case <-tm.C:
			t.Fatalf("a %v timer fired twice", d)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestTimerStopAndClose checks that Stop keeps a timer from firing and
// that Close ends its goroutine (TestMain's goleak would see it) and makes
// Reset fail with ErrClosed.
func TestTimerStopAndClose(t *testing.T) {
	tm, err := NewTimer()
	if err != nil {
		t.Fatal(err)
	}
	if err := tm.Reset(time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if err := tm.Stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-tm.C:
		t.Fatal("a stopped timer fired")
	case <-time.After(20 * time.Millisecond):
	}
	if err := tm.Close(); err != nil {
		t.Fatal(err)
	}
	if err := tm.Reset(time.Millisecond); err != ErrClosed {
		t.Fatalf("Reset after Close: %v, want ErrClosed", err)
	}
}

// BenchmarkTimer times a 50 µs Timer against a 50 µs time.Timer, from
// Reset to the value on C; on an otherwise idle process the latter takes
// about a millisecond.
func BenchmarkTimer(b *testing.B) {
	const d = 50 * time.Microsecond
	b.Run("timerfd", func(b *testing.B) {
		tm, err := NewTimer()
		if err != nil {
			b.Fatal(err)
		}
		defer tm.Close()
		for b.Loop() {
			if err := tm.Reset(d); err != nil {
				b.Fatal(err)
			}
			<-tm.C
		}
	})
	b.Run("time.Timer", func(b *testing.B) {
		tm := time.NewTimer(time.Hour)
		defer tm.Stop()
		for b.Loop() {
			tm.Reset(d)
			<-tm.C
		}
	})
}
