package softroce

import "testing"

// TestProportionalWindow: a selective-repeat window shrinks at the end of
// each round trip by half the fraction of the round's packets lost, at
// most to half, and grows back by one packet per 8 acknowledged.
func TestProportionalWindow(t *testing.T) {
	w := newProportionalWindow(512, 0)
	high := uint32(512) // a full window in flight
	w.onAck(1, 0, high) // the first round, PSN 0 alone, ends; the next ends at 511
	w.onResent(5)       // 5 of 512 lost: about 1%
	w.onAck(510, 510, high)
	if w.cwnd != 512 {
		t.Fatalf("cwnd %d before the round ended, want 512", w.cwnd)
	}
	w.onAck(1, 511, high)
	// 512 × 5 / (2 × (511+5)) = 2.
	if w.cwnd != 510 || w.ssthresh != 510 {
		t.Fatalf("after a round with 1%% loss: cwnd %d ssthresh %d, want 510 and 510", w.cwnd, w.ssthresh)
	}
	// A round that loses nearly everything it sent halves the window, once.
	high = 1022
	w.onResent(510)
	w.onResent(510) // lost again: still one round
	w.onAck(1, 1021, high)
	if w.cwnd != 256 {
		t.Fatalf("after a round that lost everything: cwnd %d, want 256", w.cwnd)
	}
	// Growth: one packet per 8 acknowledged.
	high = 1022 + 256
	w.onAck(160, 1021+160, high)
	if w.cwnd != 276 {
		t.Fatalf("after 160 packets acknowledged: cwnd %d, want 276", w.cwnd)
	}
	// Losses never take it below minWindow.
	for range 20 {
		high += 512
		w.onResent(1000)
		w.onAck(1, high-1, high)
	}
	if w.cwnd != minWindow {
		t.Fatalf("after many lossy rounds: cwnd %d, want %d", w.cwnd, minWindow)
	}
	// A loss event does not move it (go-back-N's rule); a timeout does.
	w = newProportionalWindow(512, 0)
	w.onLoss(0, 512)
	if w.cwnd != 512 {
		t.Fatalf("onLoss moved a proportional window to %d", w.cwnd)
	}
	w.onTimeout(512)
	if w.cwnd != minWindow || w.ssthresh != 256 {
		t.Fatalf("after a timeout: cwnd %d ssthresh %d, want %d and 256", w.cwnd, w.ssthresh, minWindow)
	}
}

// TestRenoWindow: a go-back-N window halves once per window of data and
// collapses on a timeout.
func TestRenoWindow(t *testing.T) {
	w := newSendWindow(512, 0)
	w.onLoss(10, 512)
	w.onLoss(20, 512) // the same window: no second cut
	if w.cwnd != 256 {
		t.Fatalf("after two losses in one window: cwnd %d, want 256", w.cwnd)
	}
	w.onLoss(600, 900)
	if w.cwnd != 128 {
		t.Fatalf("after a loss in the next window: cwnd %d, want 128", w.cwnd)
	}
	w.onAck(128, 700, 900)
	if w.cwnd != 129 {
		t.Fatalf("after a window acknowledged: cwnd %d, want 129", w.cwnd)
	}
	w.onTimeout(900)
	if w.cwnd != minWindow {
		t.Fatalf("after a timeout: cwnd %d, want %d", w.cwnd, minWindow)
	}
}

// TestRTTFromSelectiveReport: a packet that arrived past a gap is timed by
// the selective NAK that reports it; the cumulative ACK that follows the
// repair of the gap does not time it again (it would measure the repair).
func TestRTTFromSelectiveReport(t *testing.T) {
	var r rttEstimator
	r.sent(10, 1000)
	r.arrived(9, 1500) // another packet
	if r.srtt != 0 || !r.timing {
		t.Fatalf("timed by a report of another packet: srtt %d", r.srtt)
	}
	r.arrived(10, 1400)
	if r.srtt != 400 || r.timing {
		t.Fatalf("srtt %d, timing %v after the timed packet was reported; want 400, false", r.srtt, r.timing)
	}
	r.acked(12, 90000) // the repair's ACK, much later
	if r.srtt != 400 {
		t.Errorf("srtt %d after the repair's ACK, want 400 still", r.srtt)
	}
}
