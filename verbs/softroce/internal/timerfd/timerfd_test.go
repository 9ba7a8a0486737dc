//go:build linux

package timerfd

import (
	"errors"
	"testing"
	"time"
)

// TestSleepLastsD checks that Sleep does not return before its time.
func TestSleepLastsD(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, d := range []time.Duration{0, 20 * time.Microsecond, time.Millisecond} {
		start := time.Now()
		if err := s.Sleep(d); err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < d {
			t.Fatalf("a %v sleep took %v", d, took)
		}
	}
}

// BenchmarkSleep compares 50 µs sleeps on a Sleeper with time.Sleep; on
// an otherwise idle process the latter takes about a millisecond.
func BenchmarkSleep(b *testing.B) {
	const d = 50 * time.Microsecond
	b.Run("timerfd", func(b *testing.B) {
		s, err := New()
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for b.Loop() {
			if err := s.Sleep(d); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("time.Sleep", func(b *testing.B) {
		for b.Loop() {
			time.Sleep(d)
		}
	})
}

// TestWakeAndClose checks that Wake ends a long sleep early and that
// Close ends one with ErrClosed.
func TestWakeAndClose(t *testing.T) {
	s, err := New()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Sleep(time.Hour) }()
	time.Sleep(10 * time.Millisecond)
	s.Wake()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wake did not end the sleep")
	}
	go func() { done <- s.Sleep(time.Hour) }()
	time.Sleep(10 * time.Millisecond)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("sleep after Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not end the sleep")
	}
	if err := s.Sleep(time.Millisecond); !errors.Is(err, ErrClosed) {
		t.Fatalf("sleep on a closed sleeper: %v", err)
	}
}
