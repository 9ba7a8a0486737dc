package softroce

import (
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

// TestQPNsRandom: the QPNs of a device's QPs are distinct, never reserved,
// not in sequence, and spread over the 24-bit space.
func TestQPNsRandom(t *testing.T) {
	o := pairOpts{}
	o.defaults()
	a, _ := newPair(t, pipeLinks, noFaults, o)
	const n = 256
	seen := map[uint32]bool{a.qp.QPN(): true}
	qpns := []uint32{a.qp.QPN()}
	var top [256]bool // distinct high bytes
	for range n - 1 {
		qp, err := a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: a.scq, RecvCQ: a.rcq,
			Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		defer qp.Close()
		q := qp.QPN()
		if q < minQPN || q > maxQPN {
			t.Fatalf("QPN %#x is reserved", q)
		}
		if seen[q] {
			t.Fatalf("QPN %#x handed out twice", q)
		}
		seen[q] = true
		qpns = append(qpns, q)
		top[q>>16] = true
	}
	steps := 0
	for i := 1; i < len(qpns); i++ {
		if d := int64(qpns[i]) - int64(qpns[i-1]); d >= -4 && d <= 4 {
			steps++
		}
	}
	// Random QPNs land within 4 of the previous one with probability
	// about 2^-21 each; numbers in sequence always do.
	if steps > 1 {
		t.Errorf("%d of %d QPNs lie within 4 of the previous one: %#x", steps, n-1, qpns[:8])
	}
	spread := 0
	for _, b := range top {
		if b {
			spread++
		}
	}
	// 256 uniform draws hit about 162 of 256 high bytes; fewer than 100
	// is beyond chance (and sequential numbers hit 1).
	if spread < 100 {
		t.Errorf("QPNs cover only %d of 256 high bytes", spread)
	}
}

// TestPickQPN: pickQPN skips taken and reserved numbers, maps every draw
// into range, and finds the last free QPN of a nearly full space.
func TestPickQPN(t *testing.T) {
	draws := []uint32{0, 0xffffffff, 7, 7, 7}
	next := func() uint32 { d := draws[0]; draws = draws[1:]; return d }
	taken := map[uint32]bool{minQPN: true}
	got, ok := pickQPN(next, func(n uint32) bool { return taken[n] })
	if want := uint32(minQPN) + 0xffffffff%(maxQPN-minQPN+1); !ok || got != want {
		t.Fatalf("after one collision got %#x, %v; want %#x", got, ok, want)
	}
	for _, d := range []uint32{0, 1, 0xfffffe, 0xffffff, 0x10} {
		n, ok := pickQPN(func() uint32 { return d }, func(uint32) bool { return false })
		if !ok || n < minQPN || n > maxQPN {
			t.Errorf("draw %#x gave QPN %#x", d, n)
		}
	}
	const free = 0x123456
	n, ok := pickQPN(func() uint32 { return 0 }, func(n uint32) bool { return n != free })
	if !ok || n != free {
		t.Errorf("nearly full space: got %#x, %v; want %#x", n, ok, free)
	}
	if _, ok := pickQPN(func() uint32 { return 5 }, func(uint32) bool { return true }); ok {
		t.Error("a full space gave a QPN")
	}
}
