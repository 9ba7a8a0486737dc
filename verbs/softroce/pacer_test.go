package softroce

import (
	"testing"
	"time"
)

// TestPacer: a token bucket of one packet per interval that holds at
// most burstTime of packets (at least minBurst of them, and more than a
// GSO batch when the rate is high), makes a held sender wait for
// paceQuantum's credit (one packet's when that is longer), and lets a
// resend run it into debt that later packets wait out.
func TestPacer(t *testing.T) {
	const us = int64(time.Microsecond)
	for _, tc := range []struct {
		interval int64
		burst    int // packets that go at once after an idle time
	}{
		{0, -1},        // not paced
		{us, 1000},     // 1000 packets per burstTime: more than a GSO batch (txBatch)
		{10 * us, 100}, // 100 packets per burstTime
		{100 * us, 10}, // burstTime at the rate
		{2 * time.Millisecond.Nanoseconds(), minBurst}, // slower than burstTime per packet
	} {
		var p pacer
		p.quantum = paceQuantum // as on the fine clock
		p.setInterval(tc.interval)
		now := int64(time.Second)
		n := 0
		for p.timeUntilSend(now) == 0 && n < 2000 {
			p.sent(now)
			n++
		}
		if tc.burst < 0 {
			if n != 2000 {
				t.Errorf("unpaced: held after %d packets", n)
			}
			continue
		}
		if n != tc.burst {
			t.Errorf("interval %v: a burst of %d packets, want %d", time.Duration(tc.interval), n, tc.burst)
		}
		wait := p.timeUntilSend(now)
		if want := max(tc.interval, paceQuantum); wait <= 0 || wait > want {
			t.Errorf("interval %v: wait %v after the burst, want (0, %v]", time.Duration(tc.interval), time.Duration(wait), time.Duration(want))
		}
		if p.timeUntilSend(now+wait) != 0 {
			t.Errorf("interval %v: still held after the wait", time.Duration(tc.interval))
		}
	}

	// On runtime timers (no quantum) a held sender waits for one packet.
	var r pacer
	r.setInterval(10 * int64(time.Microsecond))
	for r.timeUntilSend(int64(time.Second)) == 0 {
		r.sent(int64(time.Second))
	}
	if w := r.timeUntilSend(int64(time.Second)); w <= 0 || w > 10*int64(time.Microsecond) {
		t.Errorf("without a quantum: wait %v, want (0, 10µs]", time.Duration(w))
	}

	// Debt: packets sent past the credit (resends) hold the next ones
	// back for as long.
	var p pacer
	p.quantum = paceQuantum
	p.setInterval(10 * us)
	now := int64(time.Second)
	for range 100 + 5 {
		p.sent(now)
	}
	if w := p.timeUntilSend(now); w != 50*us+paceQuantum {
		t.Fatalf("after 5 packets past the credit: wait %v, want 50µs and paceQuantum", time.Duration(w))
	}
}
