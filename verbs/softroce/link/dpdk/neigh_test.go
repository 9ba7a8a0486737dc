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
	if tb.answer(ip, mac, now) {
		t.Fatal("an answer nobody asked for was taken")
	}
	tb.refresh(ip, mac, now)
	if _, st := tb.lookup(ip, now); st != neighNone {
		t.Fatal("an unsolicited claim made an entry")
	}
	if !tb.ask(ip, now) || tb.ask(ip, now.Add(retransTime/2)) || !tb.ask(ip, now.Add(retransTime)) {
		t.Fatal("requests not rate-limited to one per retransTime")
	}
	now = now.Add(retransTime)
	if tb.answer(ip, mac, now.Add(answerWindow)) {
		t.Fatal("an answer after the window was taken")
	}
	if !tb.answer(ip, mac, now) {
		t.Fatal("the answer to our request was not taken")
	}
	if tb.answer(ip, wire.MAC{2, 0, 0, 0, 0, 66}, now) {
		t.Fatal("a second answer to one request was taken")
	}
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
	// A gratuitous claim with the same MAC confirms; with another MAC it
	// changes nothing but makes the entry stale, to be asked for again.
	tb.refresh(ip, mac, now.Add(reachableTime-1))
	if _, st := tb.lookup(ip, now.Add(2*reachableTime-2)); st != neighReachable {
		t.Errorf("a matching claim did not confirm: %v", st)
	}
	later := now.Add(reachableTime)
	tb.refresh(ip, wire.MAC{2, 0, 0, 0, 0, 66}, later)
	if got, st := tb.lookup(ip, later); st != neighStale || got != mac {
		t.Errorf("after a claim of another MAC: %v %v, want the old MAC, stale", got, st)
	}
	static := netip.MustParseAddr("192.0.2.11")
	tb.setStatic(static, mac)
	tb.refresh(static, wire.MAC{7}, now)
	if tb.answer(static, wire.MAC{7}, now) {
		t.Fatal("a static entry took an answer")
	}
	if got, st := tb.lookup(static, now.Add(time.Hour)); st != neighReachable || got != mac || tb.ask(static, now) {
		t.Fatal("static entry changed, expired or asked for")
	}
}

func TestTokenBucket(t *testing.T) {
	b := tokenBucket{rate: 100, burst: 10}
	now := time.Unix(5, 0)
	n := 0
	for range 1000 {
		if b.allow(now) {
			n++
		}
	}
	if n != 10 {
		t.Errorf("%d allowed at one instant, want the burst of 10", n)
	}
	n = 0
	for i := range 2000 { // 2 s, an event every millisecond
		if b.allow(now.Add(time.Duration(i+1) * time.Millisecond)) {
			n++
		}
	}
	if n < 195 || n > 215 {
		t.Errorf("%d allowed in 2 s at 100/s", n)
	}
}

func TestNeighTableBounded(t *testing.T) {
	tb := newNeighTable()
	now := time.Unix(1000, 0)
	for i := range 3 * maxNeighbours {
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		at := now.Add(time.Duration(i) * time.Millisecond)
		tb.ask(ip, at)
		tb.answer(ip, wire.MAC{byte(i)}, at)
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
