package softroce

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestArrival: a kernel receive stamp is put on the engine's clock by its
// age at the batch's start; no stamp, one from the future or one older
// than maxStampAge (a wall clock that stepped) is not known (0), and the
// completer then times from now.
func TestArrival(t *testing.T) {
	rx := &receiver{mono: int64(5 * time.Second), wall: 1_700_000_000 * 1e9}
	for _, c := range []struct {
		name   string
		rxTime int64
		want   int64
	}{
		{"none", 0, 0},
		{"3 ms before", rx.wall - int64(3*time.Millisecond), rx.mono - int64(3*time.Millisecond)},
		{"at the batch", rx.wall, rx.mono},
		{"in the future", rx.wall + 1, 0},
		{"too old", rx.wall - maxStampAge - 1, 0},
	} {
		if got := rx.arrival(&link.Packet{RxTime: c.rxTime}); got != c.want {
			t.Errorf("%s: arrival %d, want %d", c.name, got, c.want)
		}
	}
}

// stampedLink stamps every packet it receives as having arrived ago
// before Recv returns, as a kernel stamps packets that a late receive
// loop finds waiting.
type stampedLink struct {
	link.Link
	ago time.Duration
}

func (l *stampedLink) Recv(pkts []link.Packet) (int, error) {
	n, err := l.Link.Recv(pkts)
	stamp := time.Now().Add(-l.ago).UnixNano()
	for i := range pkts[:n] {
		pkts[i].RxTime = stamp
	}
	return n, err
}

// TestCongestionTimesFromArrival: over a path of 10 ms round trips whose
// acknowledgements the link stamps as having arrived 4 ms before the
// engine got them, the congestion controller measures about 6 ms; the
// retransmission timeout's estimate, which must cover when the engine
// gets to an acknowledgement, measures the whole 10.
func TestCongestionTimesFromArrival(t *testing.T) {
	o := pairOpts{selective: true, congestion: true, mtu: verbs.MTU1024}
	o.defaults()
	n := pipe.NewNetwork(pipe.Faults{Delay: 5 * time.Millisecond})
	t.Cleanup(func() { n.Close() })
	la, err := n.Endpoint(netip.MustParseAddrPort("192.0.2.1:4791"))
	must(t, err)
	lb, err := n.Endpoint(netip.MustParseAddrPort("192.0.2.2:4791"))
	must(t, err)
	a, b := newNode(t, &stampedLink{Link: la, ago: 4 * time.Millisecond}, o), newNode(t, lb, o)
	connect(t, a, b, o)
	for id := uint64(1); id <= 8; id++ {
		a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 16<<10)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		expectWC(t, a.scq, id, verbs.WCRDMAWrite, verbs.WCSuccess)
	}
	a.qp.mu.Lock()
	cc, ok := a.qp.comp.win.cc.(*delayGated)
	var ccRTT, rto int64
	if ok {
		ccRTT, rto = cc.minRTT, a.qp.comp.rtt.srtt
	}
	a.qp.mu.Unlock()
	if !ok {
		t.Fatal("no congestion controller on the QP")
	}
	t.Logf("controller's minimum round trip %v, the timeout estimator's %v", time.Duration(ccRTT), time.Duration(rto))
	if ccRTT < int64(5*time.Millisecond) || ccRTT > int64(8*time.Millisecond) {
		t.Errorf("controller's minimum round trip %v, want about 6 ms (10 ms, less the 4 ms the stamps say)", time.Duration(ccRTT))
	}
	if rto < int64(10*time.Millisecond) {
		t.Errorf("timeout estimator's round trip %v, want 10 ms or more", time.Duration(rto))
	}
}
