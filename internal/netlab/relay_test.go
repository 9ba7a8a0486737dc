package netlab

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"
)

// numbered returns frame i: its number in the first 8 bytes.
func numbered(i uint64) []byte {
	b := make([]byte, 64)
	binary.BigEndian.PutUint64(b, i)
	return b
}

// runImpairer feeds n numbered frames, one per microsecond, then flushes,
// and returns the numbers in the order they were sent.
func runImpairer(t *testing.T, imp Impairment, n int) (*impairer, []uint64) {
	t.Helper()
	m := newImpairer(imp, 0)
	var out []uint64
	send := func(b []byte) error {
		out = append(out, binary.BigEndian.Uint64(b))
		return nil
	}
	now := time.Unix(0, 0)
	buf := make([]byte, 64)
	for i := range uint64(n) {
		now = now.Add(time.Microsecond)
		m.expire(now, send)
		copy(buf, numbered(i))
		m.frame(buf, now, send)
		clear(buf) // the relay reuses its buffer: held frames must be copies
	}
	m.flush(send)
	return m, out
}

func TestImpairerForwardsInOrder(t *testing.T) {
	m, out := runImpairer(t, Impairment{}, 1000)
	if len(out) != 1000 {
		t.Fatalf("sent %d frames, want 1000", len(out))
	}
	for i, v := range out {
		if v != uint64(i) {
			t.Fatalf("frame %d is number %d", i, v)
		}
	}
	if s := m.stats; s.Frames != 1000 || s.Sent != 1000 || s.Duplicated != 0 || s.Held != 0 || s.Reordered != 0 {
		t.Errorf("stats %+v", s)
	}
}

func TestImpairerDuplicates(t *testing.T) {
	const n = 100000
	m, out := runImpairer(t, Impairment{Duplicate: 0.01, Seed: 7}, n)
	s := m.stats
	// 1% of 100000: 1000 expected, and a binomial spread of about 31.
	if s.Duplicated < 850 || s.Duplicated > 1150 {
		t.Errorf("duplicated %d of %d frames, want about 1%%", s.Duplicated, n)
	}
	if uint64(len(out)) != n+s.Duplicated || s.Sent != uint64(len(out)) {
		t.Errorf("sent %d frames (stats %d), want %d + %d duplicates", len(out), s.Sent, n, s.Duplicated)
	}
	// Each number appears once or twice, in order.
	var dups uint64
	for i := 1; i < len(out); i++ {
		switch {
		case out[i] == out[i-1]:
			dups++
		case out[i] != out[i-1]+1:
			t.Fatalf("frame %d after %d", out[i], out[i-1])
		}
	}
	if dups != s.Duplicated {
		t.Errorf("%d frames came twice, stats say %d", dups, s.Duplicated)
	}
}

func TestImpairerReorders(t *testing.T) {
	const n = 100000
	m, out := runImpairer(t, Impairment{Reorder: 0.05, ReorderDepth: 3, Seed: 9}, n)
	s := m.stats
	if s.Held < 4500 || s.Held > 5500 {
		t.Errorf("held %d of %d frames, want about 5%%", s.Held, n)
	}
	if s.Reordered != s.Held {
		t.Errorf("reordered %d of %d held frames: with frames every microsecond and a 2 ms hold, every held frame is passed", s.Reordered, s.Held)
	}
	if len(out) != n || s.Sent != n {
		t.Fatalf("sent %d frames (stats %d), want %d", len(out), s.Sent, n)
	}
	// Every frame goes out once; count the frames that went out after a
	// higher number (the reordered ones, as a receiver sees them).
	seen := make([]bool, n)
	var late uint64
	var highest uint64
	for i, v := range out {
		if seen[v] {
			t.Fatalf("frame %d sent twice", v)
		}
		seen[v] = true
		if i > 0 && v < highest {
			late++
		}
		highest = max(highest, v)
	}
	if late != s.Reordered {
		t.Errorf("%d frames arrived after a later one, stats say %d reordered", late, s.Reordered)
	}
}

func TestImpairerHoldExpires(t *testing.T) {
	m := newImpairer(Impairment{Reorder: 1, ReorderHold: time.Millisecond}, 0)
	var out [][]byte
	send := func(b []byte) error { out = append(out, bytes.Clone(b)); return nil }
	now := time.Unix(0, 0)
	m.frame(numbered(1), now, send)
	if len(out) != 0 {
		t.Fatalf("a held frame went out at once")
	}
	if d, ok := m.nextDeadline(); !ok || !d.Equal(now.Add(time.Millisecond)) {
		t.Fatalf("deadline %v %v, want %v", d, ok, now.Add(time.Millisecond))
	}
	m.expire(now.Add(999*time.Microsecond), send)
	if len(out) != 0 {
		t.Fatalf("released before its hold time")
	}
	m.expire(now.Add(time.Millisecond), send)
	if len(out) != 1 || !bytes.Equal(out[0], numbered(1)) {
		t.Fatalf("after the hold time: sent %x", out)
	}
	if _, ok := m.nextDeadline(); ok {
		t.Errorf("a deadline with nothing held")
	}
	// Released by time with no frame passing it: delayed, not reordered.
	if m.stats.Held != 1 || m.stats.Reordered != 0 {
		t.Errorf("stats %+v", m.stats)
	}
}

func TestImpairmentCheck(t *testing.T) {
	for _, imp := range []Impairment{{Duplicate: -0.1}, {Reorder: 0.6, Duplicate: 0.6}, {ReorderDepth: -1}} {
		if imp.Check() == nil {
			t.Errorf("%+v: no error", imp)
		}
	}
	if err := (Impairment{Duplicate: 0.01, Reorder: 0.05}).Check(); err != nil {
		t.Error(err)
	}
}
