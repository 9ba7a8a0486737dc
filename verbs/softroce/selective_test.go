package softroce

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

func TestRecvBitmap(t *testing.T) {
	var b recvBitmap
	b.init(sackWindow)
	epsn := uint32(wire.PSNMask - 2) // the window wraps the PSN space
	for _, d := range []uint32{2, 3, 40} {
		if !b.set(psnAdd(epsn, d)) {
			t.Fatalf("set(epsn+%d) reported a duplicate", d)
		}
	}
	if b.set(psnAdd(epsn, 3)) {
		t.Fatal("second set of the same PSN not reported as a duplicate")
	}
	buf := make([]byte, wire.MaxSACKBytes)
	n := b.encode(buf, epsn)
	s := wire.SACK(buf[:n])
	if n != 8 {
		t.Fatalf("encode: %d bytes, want 8 (bit 39 is the highest)", n)
	}
	for i := range s.Bits() {
		want := i == 1 || i == 2 || i == 39
		if s.Has(i) != want {
			t.Errorf("bit %d = %v, want %v", i, s.Has(i), want)
		}
	}
	// The expected PSN arrives: the placed ones behind it are taken in order.
	epsn = psnAdd(epsn, 1)
	if b.take(epsn) {
		t.Fatal("epsn+1 was never placed")
	}
	epsn = psnAdd(epsn, 1)
	for b.take(epsn) {
		epsn = psnAdd(epsn, 1)
	}
	if want := psnAdd(wire.PSNMask-2, 4); epsn != want || b.n != 1 {
		t.Fatalf("after the fill: epsn %#x with %d placed, want %#x with 1", epsn, b.n, want)
	}
	b.clear()
	if !b.empty() || b.encode(buf, epsn) != 0 {
		t.Fatal("clear left bits")
	}
}

func TestScoreboard(t *testing.T) {
	s := newScoreboard(64)
	s.reportAt(1000, 0, 0)
	base := uint32(wire.PSNMask - 4)
	psn := func(i int) uint32 { return psnAdd(base, uint32(i)) }
	for i := range 10 {
		s.sent(psn(i), 0, false)
	}
	for i := 5; i <= 8; i++ {
		s.sack(psn(i))
	}
	if s.sacked != 4 || !s.any || s.high != psn(9) {
		t.Fatalf("sacked %d high %#x, want 4 and %#x", s.sacked, s.high, psn(9))
	}
	for i := range 10 {
		// psn(i) went out as transmission i+1; psn(8), transmission 9,
		// arrived, so transmissions up to 6 (PSNs 0..5) count as lost,
		// except those that arrived.
		want := i <= 4
		if s.lost(psn(i)) != want {
			t.Errorf("lost(%d) = %v, want %v", i, s.lost(psn(i)), want)
		}
	}
	s.sent(psn(4), 1, true) // resent: transmission 11
	if s.lost(psn(4)) {
		t.Error("a PSN just resent counts as lost")
	}
	s.sack(psn(9)) // transmission 10 arrived: older than the resend
	if s.lost(psn(4)) {
		t.Error("an arrival sent before the resend made it lost")
	}
	for i := 10; i < 13; i++ {
		s.sent(psn(i), 0, false) // transmissions 12..14
	}
	s.sack(psn(12))
	if !s.lost(psn(4)) {
		t.Error("the resend, three transmissions older than an arrival, is not lost")
	}
	s.acked(psn(-1), psn(9))
	if s.sacked != 1 || !s.any {
		t.Fatalf("after a cumulative ACK to 9: %d sacked (want 1, PSN 12), any %v", s.sacked, s.any)
	}
	s.acked(psn(9), psn(12))
	if s.sacked != 0 || s.any {
		t.Fatalf("after a cumulative ACK to 12: %d sacked, any %v", s.sacked, s.any)
	}
}

// TestScoreboardStaleReport: a report that the responder got a PSN, coming
// in sooner than a smoothed round trip after that PSN was resent, describes the
// earlier copy; it must not declare the resend, or what was sent before
// it, lost.
func TestScoreboardStaleReport(t *testing.T) {
	const rtt = 100
	s := newScoreboard(64)
	for i := range uint32(8) {
		s.sent(i, 0, false)
	}
	s.reportAt(rtt, rtt, 0)
	s.sack(5)
	s.sack(6)
	s.arrived(7) // arrived, and the responder could not place it
	for i, want := range []bool{true, true, true, true, true, false, false, true} {
		if s.lost(uint32(i)) != want {
			t.Fatalf("lost(%d) = %v, want %v", i, s.lost(uint32(i)), want)
		}
	}
	for _, p := range []uint32{0, 1, 2, 3, 4, 7} {
		s.sent(p, rtt+10, true) // resent
	}
	// A second report of the first copy of 7, a moment later.
	s.reportAt(rtt+20, rtt, 0)
	s.arrived(7)
	for _, p := range []uint32{0, 1, 2, 3, 4, 7} {
		if s.lost(p) {
			t.Errorf("a stale report made the resend of %d lost", p)
		}
	}
	// A round trip later, a report that 7 arrived unplaced again is about
	// the resend: what was resent before it is lost.
	s.reportAt(2*rtt+20, rtt, 0)
	s.arrived(7)
	if !s.lost(0) || !s.lost(7) {
		t.Error("a report a round trip after the resend did not count")
	}
}

// TestScoreboardForget: after forget, PSNs reported as arrived past the
// cumulative ACK count as lost at the next timeout, like the rest.
func TestScoreboardForget(t *testing.T) {
	s := newScoreboard(64)
	for i := range uint32(8) {
		s.sent(i, 0, false)
	}
	s.sack(5)
	s.sack(6)
	s.timedOut()
	if s.lost(5) || s.lost(6) || !s.lost(4) {
		t.Fatal("reported PSNs lost, or an unreported one not lost, before forget")
	}
	s.forget()
	s.timedOut()
	for i := range uint32(8) {
		if !s.lost(i) {
			t.Errorf("PSN %d not lost after forget and a timeout", i)
		}
	}
	if s.sacked != 0 || s.any {
		t.Errorf("forget left sacked %d, any %v", s.sacked, s.any)
	}
}

// TestScoreboardTimeRule: a PSN sent more than a reordering window before
// one that arrived is lost, however few transmissions followed it (the
// last packets of a burst, a resend), and one sent within the window is
// not: that is reordering RACK tolerates.
func TestScoreboardTimeRule(t *testing.T) {
	const us = int64(time.Microsecond)
	s := newScoreboard(64)
	s.sent(0, 100*us, false)
	s.sent(1, 180*us, false)
	s.sent(2, 200*us, false)
	s.reportAt(500*us, 0, 0) // no round trip measured: no time rule
	s.sack(2)
	if s.lost(0) || s.lost(1) {
		t.Fatal("lost before any round trip was measured")
	}
	s.reportAt(600*us, 200*us, 0) // reordering window: max(200/4, 50) µs
	s.sack(2)
	if !s.lost(0) {
		t.Error("PSN 0, sent 100 µs before PSN 2 arrived, is not lost")
	}
	if s.lost(1) {
		t.Error("PSN 1, sent 20 µs before PSN 2, counts as lost: that is within the reordering window")
	}
	// A resend of 0 is lost too once a later transmission (sent more than
	// the window after it) is reported, credibly, to have arrived.
	s.sent(0, 700*us, true)
	s.sent(3, 800*us, false)
	s.reportAt(1100*us, 200*us, 0)
	s.sack(3)
	if !s.lost(0) {
		t.Error("the resend of 0, sent 100 µs before PSN 3 arrived, is not lost")
	}
}

// TestScoreboardResendTime: an ACK for a resent PSN may come from its
// first copy (a probe sent while the first copy's ACK was merely slow), so
// it does not say when the packet that arrived was sent, and does not make
// what was sent shortly before the resend lost.
func TestScoreboardResendTime(t *testing.T) {
	const us = int64(time.Microsecond)
	s := newScoreboard(64)
	s.sent(0, 100*us, false)
	s.sent(1, 1900*us, false)
	s.sent(0, 2000*us, true) // a probe, 100 µs after PSN 1
	s.reportAt(2500*us, 200*us, 0)
	s.acked(psnAdd(0, wire.PSNMask), 0)
	if s.lost(1) {
		t.Error("PSN 1 counts as lost after the ACK of the probe's PSN")
	}
}

// TestScoreboardLearnsReordering: a report, sooner after a resend than
// any round trip took, that the resent PSN arrived describes its first
// copy: the resend was spurious. The packet threshold then doubles and
// the time window grows by a quarter round trip, once per round trip, so
// that the same reordering is not taken for loss again.
func TestScoreboardLearnsReordering(t *testing.T) {
	const us = int64(time.Microsecond)
	s := newScoreboard(64)
	for i := range uint32(8) {
		s.sent(i, 100*us, false)
	}
	s.reportAt(400*us, 200*us, 100*us)
	for p := uint32(3); p < 8; p++ {
		s.sack(p) // 0, 1 and 2 are late: reordered, not lost
	}
	if !s.lost(0) || !s.lost(2) {
		t.Fatal("three later arrivals did not make 0 and 2 lost")
	}
	for p := range uint32(3) {
		s.sent(p, 410*us, true)
	}
	// Their first copies arrive, reported 20 µs after the resends: less
	// than the least round trip of 100 µs.
	s.reportAt(430*us, 200*us, 100*us)
	s.acked(psnAdd(0, wire.PSNMask), 7)
	if s.spurious != 3 || s.dupThresh != 2*reorderPackets || s.reoMult != 2 {
		t.Fatalf("after 3 spurious resends: spurious %d, threshold %d, window %d/4 srtt; want 3, %d, 2/4",
			s.spurious, s.dupThresh, s.reoMult, 2*reorderPackets)
	}
	// Once per round trip: more within it change nothing.
	s.sent(8, 440*us, false)
	s.sent(8, 450*us, true)
	s.reportAt(460*us, 200*us, 100*us)
	s.acked(7, 8)
	if s.dupThresh != 2*reorderPackets || s.reoMult != 2 {
		t.Fatalf("a second spurious resend within the round trip: threshold %d, window %d/4", s.dupThresh, s.reoMult)
	}
	// The same reordering of three packets is now within the threshold.
	for i := uint32(9); i < 17; i++ {
		s.sent(i, 500*us, false)
	}
	s.reportAt(520*us, 200*us, 100*us)
	for p := uint32(12); p < 15; p++ {
		s.sack(p) // 9 is 5 transmissions behind 14
	}
	if s.lost(9) || s.lost(11) {
		t.Error("reordering of 5 counts as loss after the threshold rose to 6")
	}
	// A report a whole window later proves loss, reordering or not.
	for p := uint32(17); p < 24; p++ {
		s.sent(p, 1000*us, false)
	}
	s.reportAt(1300*us, 200*us, 100*us)
	s.sack(23)
	if !s.lost(9) {
		t.Error("PSN 9, sent 500 µs before PSN 23 arrived, is not lost")
	}
}

// TestScoreboardResendNotSpurious: a report a round trip or more after a
// resend may describe the resend, and teaches nothing.
func TestScoreboardResendNotSpurious(t *testing.T) {
	const us = int64(time.Microsecond)
	s := newScoreboard(64)
	for i := range uint32(4) {
		s.sent(i, 0, false)
	}
	s.sent(0, 100*us, true)
	s.reportAt(250*us, 200*us, 100*us) // 150 µs after the resend: not credible, but possible
	s.acked(psnAdd(0, wire.PSNMask), 3)
	if s.spurious != 0 || s.dupThresh != reorderPackets || s.reoMult != 1 {
		t.Errorf("a report 150 µs after a resend, least round trip 100 µs: spurious %d, threshold %d, window %d/4", s.spurious, s.dupThresh, s.reoMult)
	}
}

// TestRecvBitmapWide: at every bitmap size a QP may have (1024, 2048 and
// 4096 PSNs), with the expected PSN anywhere (across the wrap of the PSN
// space and of the bitmap's words), the encoded SACK, read back within
// the reader's limit, names exactly the placed PSNs, in a bitmap just
// long enough for the highest; a shorter destination keeps the first
// bits.
func TestRecvBitmapWide(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 12))
	for _, window := range []int{1024, 2048, 4096} {
		for round := range 200 {
			var b recvBitmap
			b.init(window)
			epsn := r.Uint32() & wire.PSNMask
			if round%4 == 0 {
				epsn = psnAdd(wire.PSNMask, uint32(-r.IntN(window))&wire.PSNMask) // wraps
			}
			placed := map[int]bool{} // SACK bit i: epsn+1+i
			k := 1 + r.IntN(40)
			if round%10 == 0 {
				k = window // dense
			}
			for range k {
				i := r.IntN(window - 1)
				if round%3 == 0 {
					i = window - 2 - r.IntN(8) // the far end
				}
				placed[i] = true
				b.set(psnAdd(epsn, uint32(i+1)))
			}
			last := -1
			for i := range placed {
				last = max(last, i)
			}
			buf := make([]byte, window/8)
			n := b.encode(buf, epsn)
			if want := wire.SACKLenWithin(last+1, window/8); n != want {
				t.Fatalf("window %d: encode wrote %d bytes, want %d (highest bit %d)", window, n, want, last)
			}
			s := wire.SACK(buf[:n])
			lim := s.BitsWithin(window / 8)
			got := 0
			for i := s.NextSet(0, lim); i >= 0; i = s.NextSet(i+1, lim) {
				if !placed[i] {
					t.Fatalf("window %d epsn %#x: bit %d set, never placed", window, epsn, i)
				}
				if !s.Has(i) && i < s.Bits() {
					t.Fatalf("NextSet and Has disagree at %d", i)
				}
				got++
			}
			if got != len(placed) {
				t.Fatalf("window %d epsn %#x: %d bits read back, %d placed", window, epsn, got, len(placed))
			}
			// An old peer's reader, and a short destination, see the
			// first 1024 PSNs only.
			short := make([]byte, wire.MaxSACKBytes)
			m := b.encode(short, epsn)
			ss := wire.SACK(short[:m])
			for i := range 8 * wire.MaxSACKBytes {
				if ss.Has(i) != placed[i] || s.Has(i) != placed[i] {
					t.Fatalf("window %d: the first 1024 bits differ at %d", window, i)
				}
			}
		}
	}
}

// BenchmarkRecvBitmapEncode encodes a 4096-PSN bitmap with a few PSNs
// placed far past the gap, a word at a time.
func BenchmarkRecvBitmapEncode(b *testing.B) {
	var bm recvBitmap
	bm.init(4096)
	epsn := uint32(wire.PSNMask - 100)
	for _, d := range []uint32{3, 900, 2000, 4000} {
		bm.set(psnAdd(epsn, d))
	}
	buf := make([]byte, 512)
	for b.Loop() {
		bm.encode(buf, epsn)
	}
}

// TestScoreboardForgetsReordering: thresholds raised by spurious resends
// return to their start after reorderPersist loss recoveries without a
// spurious resend (RFC 8985's reo_wnd_persist), counting recoveries once
// per round trip; a spurious resend among them starts the count again.
func TestScoreboardForgetsReordering(t *testing.T) {
	const us = int64(time.Microsecond)
	const srtt = 200 * us
	s := newScoreboard(64)
	now := int64(1000 * us)
	raise := func() {
		now += 2 * srtt
		s.reportAt(now, srtt, 100*us)
		s.sent(0, now-10*us, true)
		s.markSpurious(s.index(0))
	}
	recoverN := func(n int) {
		for range n {
			now += 2 * srtt
			s.reportAt(now, srtt, 100*us)
			s.lossRecovery()
			// More losses within the round trip belong to the same
			// recovery.
			s.reportAt(now+srtt/2, srtt, 100*us)
			s.lossRecovery()
		}
	}
	raise()
	raise()
	if s.dupThresh != 4*reorderPackets || s.reoMult != 3 {
		t.Fatalf("after two spurious resends: threshold %d, window %d/4", s.dupThresh, s.reoMult)
	}
	recoverN(reorderPersist - 1)
	if s.dupThresh != 4*reorderPackets || s.reoMult != 3 {
		t.Fatalf("after %d recoveries: threshold %d, window %d/4; want them kept", reorderPersist-1, s.dupThresh, s.reoMult)
	}
	raise() // the path reorders again: the count starts over
	recoverN(reorderPersist - 1)
	if s.dupThresh != 8*reorderPackets || s.reoMult != 4 {
		t.Fatalf("a spurious resend, then %d recoveries: threshold %d, window %d/4; want 24, 4/4", reorderPersist-1, s.dupThresh, s.reoMult)
	}
	recoverN(1)
	if s.dupThresh != reorderPackets || s.reoMult != 1 {
		t.Fatalf("after %d recoveries without a spurious resend: threshold %d, window %d/4; want %d, 1/4", reorderPersist, s.dupThresh, s.reoMult, reorderPackets)
	}
	// The reordering window follows at the next report.
	s.reportAt(now+srtt, srtt, 100*us)
	if s.reoWnd != srtt/4 {
		t.Errorf("reordering window %v, want a quarter of the round trip, %v", time.Duration(s.reoWnd), time.Duration(srtt/4))
	}
}

// TestScoreboardGrow: a growing scoreboard starts at initialScoreboard
// PSNs (or its maximum, if smaller) and doubles up to its maximum,
// keeping what it knew of each PSN in flight, across the PSN wrap: which
// arrived past the gap, which are lost, when each was sent and resent,
// which resends proved spurious.
func TestScoreboardGrow(t *testing.T) {
	if s := growScoreboard(256); s.size() != 256 || s.grow(0, 10) {
		t.Fatalf("growScoreboard(256): size %d and grew; want 256, and no growth past its maximum", s.size())
	}
	if s := growScoreboard(4096); s.size() != initialScoreboard {
		t.Fatalf("growScoreboard(4096): size %d, want %d", s.size(), initialScoreboard)
	}
	s := newScoreboard(64)
	s.maxSize = 256
	s.reportAt(1000, 0, 0)
	base := uint32(wire.PSNMask - 20)
	psn := func(i int) uint32 { return psnAdd(base, uint32(i)) }
	const n = 63 // as many as 64 entries hold in flight
	for i := range n {
		s.sent(psn(i), int64(100+i), false)
	}
	s.sent(psn(3), 500, true) // a resend
	for i := 40; i < 50; i++ {
		s.sack(psn(i))
	}
	s.spuriousResend(psn(3))
	type state struct {
		sacked, lost, spur bool
		seq                uint32
		sentAt, at         int64
	}
	snapshot := func() []state {
		var st []state
		for i := range n {
			j := s.index(psn(i))
			st = append(st, state{s.isSacked(psn(i)), s.lost(psn(i)), s.spur.has(j), s.seq[j], s.sentAt[j], s.at[j]})
		}
		return st
	}
	before, sacked := snapshot(), s.sacked
	for _, want := range []int{128, 256} {
		if !s.grow(psn(0), n) || s.size() != want {
			t.Fatalf("grow: size %d, want %d", s.size(), want)
		}
		after := snapshot()
		for i := range n {
			if after[i] != before[i] {
				t.Errorf("size %d: PSN %d is %+v, was %+v", want, i, after[i], before[i])
			}
		}
		if s.sacked != sacked {
			t.Errorf("size %d: %d sacked, was %d", want, s.sacked, sacked)
		}
	}
	if s.grow(psn(0), n) || s.size() != 256 {
		t.Fatalf("grew past its maximum: size %d", s.size())
	}
}
