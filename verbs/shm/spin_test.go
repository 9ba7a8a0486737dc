package shm

import (
	"testing"
	"time"
)

// wait is one wait as spinPolicy sees it: it ended after took, or, when
// it would have taken longer than the poll budget, slept until then.
func (p *spinPolicy) wait(took time.Duration) time.Duration {
	b := p.Begin()
	p.End(b, took, took > b)
	return b
}

func TestSpinPolicyLearnsAFastPeer(t *testing.T) {
	var p spinPolicy
	if b := p.Begin(); b != spinMin {
		t.Fatalf("a new policy polls %v, want %v", b, spinMin)
	}
	p.wait(10 * time.Microsecond) // slept, but would have ended polling
	if b := p.Begin(); b != 20*time.Microsecond {
		t.Fatalf("after a 10µs wait the budget is %v, want 20µs", b)
	}
	for i := range 100 {
		if b := p.wait(10 * time.Microsecond); b != 20*time.Microsecond {
			t.Fatalf("wait %d polled %v, want the 20µs that keeps working", i, b)
		}
	}
}

func TestSpinPolicyBudgetIsBounded(t *testing.T) {
	var p spinPolicy
	p.wait(40 * time.Microsecond)
	if b := p.Begin(); b != spinMax {
		t.Fatalf("after a 40µs wait the budget is %v, want spinMax %v", b, spinMax)
	}
}

func TestSpinPolicyIdleCostsSpinMin(t *testing.T) {
	var p spinPolicy
	for i := range 50 {
		if b := p.wait(time.Second); b != spinMin {
			t.Fatalf("idle wait %d polled %v, want %v", i, b, spinMin)
		}
	}
}

// A peer that never answers while we poll (it shares our CPU, or is slow)
// costs one long poll per 2^k waits, k growing to spinBackoffMax.
func TestSpinPolicyBacksOffFromVainPolls(t *testing.T) {
	var p spinPolicy
	long := 0
	const waits = 1000
	for range waits {
		// The answer comes 30µs after we stop polling, whatever we poll.
		b := p.Begin()
		p.End(b, b+30*time.Microsecond, true)
		if b > spinMin {
			long++
		}
	}
	// Each vain poll is followed by 2^k-1 short ones and then one short
	// re-arming wait: at most about waits/2^spinBackoffMax plus the ramp.
	if max := waits>>spinBackoffMax + 2*spinBackoffMax; long > max {
		t.Fatalf("%d of %d waits polled long in vain, want at most %d", long, waits, max)
	}
	if long == 0 {
		t.Fatalf("the policy never tried polling again")
	}
}

func TestSpinPolicySuccessEndsBackoff(t *testing.T) {
	var p spinPolicy
	p.wait(10 * time.Microsecond) // budget 20µs
	b := p.Begin()
	p.End(b, b+time.Microsecond, true) // vain: backoff 1
	if b := p.Begin(); b != spinMin {
		t.Fatalf("in a backoff the budget is %v, want %v", b, spinMin)
	}
	p.End(spinMin, 10*time.Microsecond, true) // the backoff's last wait; does not re-arm
	p.wait(10 * time.Microsecond)             // re-arms
	if b := p.Begin(); b != 20*time.Microsecond {
		t.Fatalf("after the backoff the budget is %v, want 20µs", b)
	}
	p.End(20*time.Microsecond, 5*time.Microsecond, false) // success
	if p.backoff != 0 {
		t.Fatalf("a successful poll left backoff %d", p.backoff)
	}
}
