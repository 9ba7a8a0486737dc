package fallback

import (
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// stallFrom opens n connections from src to addr that each send the
// preface and the first bytes of a Hello, then stall: a slowloris.
func stallFrom(t *testing.T, src netip.Addr, addr string, n int) []net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 10 * time.Second}
	partial := append(Preface[:], AppendHello(nil, testHello())[:3]...)
	conns := make([]net.Conn, 0, n)
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	for range n {
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("attacker %v: %v", src, err)
		}
		conns = append(conns, c)
		if _, err := c.Write(partial); err != nil {
			t.Fatalf("attacker %v: %v", src, err)
		}
	}
	return conns
}

// legitServed checks that a plain client and an rsock dialer from
// 127.0.0.1 are each accepted within a few seconds.
func legitServed(t *testing.T, tl *testListener) {
	t.Helper()
	plain := dial(t, tl)
	if _, err := plain.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	r := tl.next(t, 5*time.Second)
	if r.a.Hello != nil {
		t.Fatalf("the plain client came out as rsock: %+v", r.a.Hello)
	}
	if got := readN(t, r.a.Conn, 4); string(got) != "GET " {
		t.Fatalf("plain client: server read %q", got)
	}
	rs := dial(t, tl)
	if err := WritePrefaceAndHello(rs, testHello()); err != nil {
		t.Fatal(err)
	}
	if r := tl.next(t, 5*time.Second); r.a.Hello == nil {
		t.Fatal("the rsock dialer came out as plain")
	}
}

// waitShed waits until the listener shed at least n sniffs.
func waitShed(t *testing.T, tl *testListener, n uint64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for tl.Shed() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d sniffs shed, want at least %d", tl.Shed(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestListenerSlowloris: hundreds of connections that stall mid-Hello
// (held for HandshakeTimeout, 30 s here), first from four addresses, then
// from a hundred, never stop the listener: a plain client and an rsock
// dialer from 127.0.0.1 are accepted at once each time (the old listener
// stopped accepting with MaxSniffing stalls in flight). The stalls are
// shed, oldest first of the source with the most, so at most MaxSniffing
// are in flight and the attacker sees its oldest closed.
func TestListenerSlowloris(t *testing.T) {
	const all = 64
	tl := newTestListener(t, ListenerConfig{HandshakeTimeout: 30 * time.Second, MaxSniffing: all})
	addr := tl.Addr().String()

	// Four sources, 100 stalls each.
	var first []net.Conn
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := stallFrom(t, netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)}), addr, 100)
			mu.Lock()
			first = append(first, cs[0])
			mu.Unlock()
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	waitShed(t, tl, 400-all)
	legitServed(t, tl)
	for _, c := range first {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c.Read(make([]byte, 1)); n != 0 || err == nil || isTimeout(err) {
			t.Errorf("a source's oldest stall %v is still open: read %d, %v", c.LocalAddr(), n, err)
		}
	}

	// A hundred sources, two stalls each.
	for i := range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			stallFrom(t, netip.AddrFrom4([4]byte{127, 0, 1, byte(1 + i)}), addr, 2)
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	// At most `all` sniffs in flight: of the 600 stalls, the rest were
	// shed.
	waitShed(t, tl, 600-all)
	legitServed(t, tl)
	t.Logf("%d sniffs shed", tl.Shed())
}

// TestListenerShedsTheBiggestSource: with MaxSniffing reached by one
// source's stalls, a slow client from another source (its preface comes
// byte by byte) is never the one shed, however many more stalls come:
// each displaces the stalling source's own oldest.
func TestListenerShedsTheBiggestSource(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 20 * time.Second, HandshakeTimeout: 30 * time.Second, MaxSniffing: 16})
	addr := tl.Addr().String()
	stallFrom(t, netip.MustParseAddr("127.0.0.2"), addr, 16)
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.0.3")}}
	slow, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer slow.Close()
	if _, err := slow.Write(Preface[:4]); err != nil {
		t.Fatal(err)
	}
	waitShed(t, tl, 1)
	stallFrom(t, netip.MustParseAddr("127.0.0.2"), addr, 50)
	waitShed(t, tl, 51)
	// The slow client finishes its preface and Hello: it was not shed.
	rest := append(Preface[4:], AppendHello(nil, testHello())...)
	if _, err := slow.Write(rest); err != nil {
		t.Fatal(err)
	}
	if r := tl.next(t, 5*time.Second); r.a.Hello == nil || r.a.Conn.RemoteAddr().(*net.TCPAddr).IP.String() != "127.0.0.3" {
		t.Fatalf("accepted %v (hello %v), want the slow client", r.a.Conn.RemoteAddr(), r.a.Hello)
	}
}

// TestListenerSheddingKeepsSnifferCounts: after a storm of stalls from
// many sources is shed and closed, the lists are empty again (no entry is
// leaked or removed twice).
func TestListenerSheddingKeepsSnifferCounts(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{HandshakeTimeout: 30 * time.Second, MaxSniffing: 16})
	var conns []net.Conn
	for i := range 10 {
		conns = append(conns, stallFrom(t, netip.AddrFrom4([4]byte{127, 0, 2, byte(1 + i)}), tl.Addr().String(), 6)...)
	}
	waitShed(t, tl, 60-16)
	for _, c := range conns {
		c.Close()
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		tl.mu.Lock()
		n, srcs := tl.sniffs.Len(), len(tl.sources)
		tl.mu.Unlock()
		if n == 0 && srcs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d sniffs from %d sources left after every client closed", n, srcs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := tl.Shed(); got < 60-16 {
		t.Errorf("%d shed", got)
	}
}
