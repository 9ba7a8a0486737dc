package netlab

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"
)

// tcpPair returns the two ends of a loopback TCP connection.
func tcpPair(t *testing.T) (dialed, accepted net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var aerr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		accepted, aerr = ln.Accept()
	}()
	dialed, err = net.Dial("tcp", ln.Addr().String())
	<-done
	if err != nil || aerr != nil {
		t.Fatal(err, aerr)
	}
	t.Cleanup(func() { dialed.Close(); accepted.Close() })
	return dialed, accepted
}

// exchangeBoth runs both sides of an exchange on a pair of conns.
func exchangeBoth(d, l net.Conn, cfg ExchangeConfig) (dres, lres *ExchangeResult) {
	var wg sync.WaitGroup
	wg.Go(func() { dres = Exchange(d, cfg) })
	lcfg := cfg
	lcfg.Listener = true
	wg.Go(func() { lres = Exchange(l, lcfg) })
	wg.Wait()
	return dres, lres
}

func TestExchange(t *testing.T) {
	d, l := tcpPair(t)
	const n = 3<<20 + 5 // not a multiple of the write size
	var progress []int64
	cfg := ExchangeConfig{Bytes: n, Seed: 3, WriteSize: 10000, ProgressEvery: 1 << 20,
		Progress: func(r int64) { progress = append(progress, r) }}
	var dres, lres *ExchangeResult
	var wg sync.WaitGroup
	wg.Go(func() { dres = Exchange(d, cfg) })
	lcfg := cfg
	lcfg.Listener, lcfg.Progress = true, nil
	wg.Go(func() { lres = Exchange(l, lcfg) })
	wg.Wait()
	for _, r := range []*ExchangeResult{dres, lres} {
		if r.Error != "" || r.Sent != n || r.Received != n || r.MismatchAt != -1 {
			t.Errorf("result %+v", r)
		}
	}
	if dres.SentSHA256 != lres.ReceivedSHA256 || lres.SentSHA256 != dres.ReceivedSHA256 {
		t.Errorf("hashes differ: dialer %s/%s, listener %s/%s", dres.SentSHA256, dres.ReceivedSHA256, lres.SentSHA256, lres.ReceivedSHA256)
	}
	if dres.SentSHA256 == lres.SentSHA256 {
		t.Errorf("both directions carried the same stream")
	}
	if len(progress) != 3 || progress[0] < 1<<20 || progress[2] < 3<<20 {
		t.Errorf("progress reports %v, want 3, one per MiB", progress)
	}
}

// flipConn flips the byte at offset at of what it writes.
type flipConn struct {
	net.Conn
	at, off int64
}

func (c *flipConn) Write(b []byte) (int, error) {
	if c.off <= c.at && c.at < c.off+int64(len(b)) {
		b = append([]byte(nil), b...)
		b[c.at-c.off] ^= 0x40
	}
	c.off += int64(len(b))
	return c.Conn.Write(b)
}

func (c *flipConn) CloseWrite() error { return c.Conn.(*net.TCPConn).CloseWrite() }

func TestExchangeDetectsCorruption(t *testing.T) {
	d, l := tcpPair(t)
	const at = 123457
	dres, lres := exchangeBoth(&flipConn{Conn: d, at: at}, l, ExchangeConfig{Bytes: 1 << 20, Seed: 4})
	if lres.MismatchAt != at || !strings.Contains(lres.Error, "offset 123457") {
		t.Errorf("listener: mismatch at %d, error %q; want offset %d", lres.MismatchAt, lres.Error, at)
	}
	// The flip happens below the dialer's hash: the hashes must differ.
	if dres.SentSHA256 == lres.ReceivedSHA256 {
		t.Errorf("a flipped byte left the SHA-256 equal")
	}
}

func TestExchangeStalls(t *testing.T) {
	d, l := tcpPair(t)
	// The listener never reads nor writes: the dialer's read stalls.
	_ = l
	res := Exchange(d, ExchangeConfig{Bytes: 1000, Seed: 5, Stall: 200 * time.Millisecond})
	if !strings.Contains(res.Error, "stalled") {
		t.Errorf("error %q, want a stall", res.Error)
	}
}

func TestPaceDue(t *testing.T) {
	start := time.Unix(100, 0)
	for _, c := range []struct {
		n, rate int64
		want    time.Duration
	}{
		{0, 1000, 0},
		{1000, 1000, time.Second},
		{1 << 20, 8 << 20, time.Second / 8},
		{24 << 20, 8 << 20, 3 * time.Second},
	} {
		if got := paceDue(start, c.n, c.rate).Sub(start); got != c.want {
			t.Errorf("%d bytes at %d B/s: due after %v, want %v", c.n, c.rate, got, c.want)
		}
	}
}
