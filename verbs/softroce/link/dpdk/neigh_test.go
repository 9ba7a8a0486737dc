package dpdk

import (
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

func TestNeighTable(t *testing.T) {
	tb := newNeighTable()
	now := time.Unix(1000, 0)
	ip := netip.MustParseAddr("192.0.2.9")
	mac := wire.MAC{2, 0, 0, 0, 0, 9}
	if _, st := tb.lookup(ip, now); st != neighNone {
		t.Fatalf("empty table: %v", st)
	}
	if !tb.ask(ip, now) || tb.ask(ip, now.Add(retransTime/2)) || !tb.ask(ip, now.Add(retransTime)) {
		t.Fatal("requests not rate-limited to one per retransTime")
	}
	tb.learn(ip, wire.MAC{1}, now, true) // a pending entry takes an update
	tb.learn(netip.MustParseAddr("192.0.2.10"), mac, now, true)
	if _, st := tb.lookup(netip.MustParseAddr("192.0.2.10"), now); st != neighNone {
		t.Fatal("an update created an entry")
	}
	tb.learn(ip, mac, now, false)
	for _, c := range []struct {
		after time.Duration
		want  neighState
	}{{0, neighReachable}, {reachableTime - 1, neighReachable}, {reachableTime, neighStale},
		{reachableTime + staleTime - 1, neighStale}, {reachableTime + staleTime, neighNone}} {
		got, st := tb.lookup(ip, now.Add(c.after))
		if st != c.want || (st != neighNone && got != mac) {
			t.Errorf("after %v: %v %v, want %v", c.after, got, st, c.want)
		}
	}
	static := netip.MustParseAddr("192.0.2.11")
	tb.setStatic(static, mac)
	tb.learn(static, wire.MAC{7}, now, false)
	if got, st := tb.lookup(static, now.Add(time.Hour)); st != neighReachable || got != mac || tb.ask(static, now) {
		t.Fatal("static entry changed, expired or asked for")
	}
}

func TestNeighTableBounded(t *testing.T) {
	tb := newNeighTable()
	now := time.Unix(1000, 0)
	for i := range 3 * maxNeighbours {
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		tb.learn(ip, wire.MAC{byte(i)}, now.Add(time.Duration(i)*time.Millisecond), false)
		tb.ask(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}), now)
	}
	if len(tb.m) > maxNeighbours {
		t.Fatalf("%d entries, at most %d", len(tb.m), maxNeighbours)
	}
	last := netip.AddrFrom4([4]byte{10, 0, byte((3*maxNeighbours - 1) >> 8), byte((3*maxNeighbours - 1) & 0xff)})
	if _, st := tb.lookup(last, now.Add(time.Second)); st != neighReachable {
		t.Fatal("the newest entry was evicted")
	}
}
