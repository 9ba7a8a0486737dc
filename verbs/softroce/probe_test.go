package softroce

import (
	"sync"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// tailDropLink drops the packets it sends whose positions (counted from 1
// over every packet sent) are in drop, each the first time only.
type tailDropLink struct {
	link.Link
	mu   sync.Mutex
	sent int
	drop map[int]bool
}

func (l *tailDropLink) Send(pkts []link.Packet) error {
	l.mu.Lock()
	keep := pkts[:0:0]
	for _, p := range pkts {
		l.sent++
		if !l.drop[l.sent] {
			keep = append(keep, p)
		}
	}
	l.mu.Unlock()
	return l.Link.Send(keep)
}

// TestLossProbeRepairsTail: the last packet of a message is lost, so no
// later arrival can show it lost and the responder has no gap to report.
// A selective-repeat QP sends it again as a loss probe, a few round trips
// later, rather than waiting for its retransmission timeout: no timeout
// is counted.
func TestLossProbeRepairsTail(t *testing.T) {
	o := pairOpts{selective: true, timeout: 18} // a timeout of about 1 s: only a probe repairs fast
	o.defaults()
	la, lb := pipeLinks.make(t, noFaults)
	// A sends one packet of WR 1, then four of WR 2: its fifth packet is
	// the tail of WR 2.
	a := newNode(t, &tailDropLink{Link: la, drop: map[int]bool{5: true}}, o)
	b := newNode(t, lb, o)
	connect(t, a, b, o)

	write := func(id uint64, n int) {
		a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
			SGL: []verbs.SGE{a.sge(0, n)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	}
	for i := range a.buf[:4096] {
		a.buf[i] = byte(i*7 + 1)
	}
	write(1, 1024) // measures a round trip
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	write(2, 4096)
	expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	c := a.dev.Counters()
	// A probe may also go out early, before the ACK of the first three
	// packets came back on a busy machine; a timeout never.
	if c.LossProbes == 0 || c.Timeouts != 0 {
		t.Errorf("loss probes %d, timeouts %d; want at least 1 and 0", c.LossProbes, c.Timeouts)
	}
	for i := range 4096 {
		if b.buf[i] != a.buf[i] {
			t.Fatalf("byte %d: %#x, want %#x", i, b.buf[i], a.buf[i])
		}
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
