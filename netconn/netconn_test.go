package netconn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/nettest"

	"github.com/rsock-go/rsock/fallback"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		runChild()
		return
	}
	deviceLinger = 0
	goleak.VerifyTestMain(m)
}

// listen starts an rsock listener on loopback.
func listen(t testing.TB, lc ListenConfig) net.Listener {
	t.Helper()
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// connPair dials ln with d and returns both ends.
func connPair(t testing.TB, ln net.Listener, d *Dialer) (client, server net.Conn) {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	return c, r.c
}

func transport(c net.Conn) string { return c.(*Conn).Transport() }

// loopbackTransport is the transport of an rsock connection over loopback
// with the environment's link: memif unless RSOCK_LINK=udp. CI runs the
// package once with each.
func loopbackTransport() string {
	if os.Getenv(EnvLink) == LinkUDP {
		return "rdma/softroce/udp"
	}
	if os.Getenv(EnvLink) == LinkMemif {
		return "rdma/softroce/memif"
	}
	return "rdma/shm"
}

// TestNetConnRDMA: x/net's conformance suite over soft-RoCE (memif on
// one host, or udp when RSOCK_LINK says so).
func TestNetConnRDMA(t *testing.T) {
	want := trMemif
	if os.Getenv(EnvLink) == LinkUDP {
		want = trUDP
	}
	ln := listen(t, ListenConfig{Provider: ProviderSoftRoCE})
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
		if transport(c) != want || transport(s) != want {
			return nil, nil, nil, fmt.Errorf("transports %q, %q, want %q", transport(c), transport(s), want)
		}
		return c, s, func() { c.Close(); s.Close() }, nil
	})
}

// TestNetConnShm: x/net's conformance suite over shm, what auto runs on
// one host.
func TestNetConnShm(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto})
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := connPair(t, ln, &Dialer{Link: LinkAuto})
		if transport(c) != trShm || transport(s) != trShm {
			return nil, nil, nil, fmt.Errorf("transports %q (%q), %q, want %q", transport(c), c.(*Conn).FallbackReason(), transport(s), trShm)
		}
		return c, s, func() { c.Close(); s.Close() }, nil
	})
}

func TestNetConnFallback(t *testing.T) {
	ln := listen(t, ListenConfig{Provider: ProviderSoftRoCE, SniffTimeout: 20 * time.Millisecond})
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := connPair(t, ln, &Dialer{Provider: ProviderTCP})
		if transport(c) != "tcp" || transport(s) != "tcp" {
			return nil, nil, nil, fmt.Errorf("transports %q, %q", transport(c), transport(s))
		}
		return c, s, func() { c.Close(); s.Close() }, nil
	})
}

// TestDeclined: a listener with RDMA off declines, and both sides stay on
// the same TCP connection.
func TestDeclined(t *testing.T) {
	ln := listen(t, ListenConfig{Provider: ProviderTCP})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
	defer c.Close()
	defer s.Close()
	if transport(c) != "tcp" || transport(s) != "tcp" {
		t.Fatalf("transports %q, %q", transport(c), transport(s))
	}
	echoCheck(t, c, s, 64<<10)
}

// echoCheck sends n random bytes from a to b, echoes them back and checks.
func echoCheck(t testing.TB, a, b net.Conn, n int) {
	t.Helper()
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(rand.Uint32())
	}
	go func() {
		io.CopyN(b, b, int64(n))
	}()
	errc := make(chan error, 1)
	go func() {
		_, err := a.Write(src)
		errc <- err
	}()
	got := make([]byte, n)
	if _, err := io.ReadFull(a, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src) {
		t.Fatal("echoed bytes differ")
	}
}

// TestPlainClient: a plain net.Dial client is served by an rsock listener.
func TestPlainClient(t *testing.T) {
	ln := listen(t, ListenConfig{})
	go func() {
		s, err := ln.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		if transport(s) != "tcp" {
			t.Errorf("plain client accepted as %q", transport(s))
		}
		io.Copy(s, s)
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	src := make([]byte, 1<<20)
	for i := range src {
		src[i] = byte(i * 13)
	}
	go c.Write(src)
	got := make([]byte, len(src))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("echo: %v", err)
	}
	if d := time.Since(start); d > 150*time.Millisecond {
		t.Logf("note: plain echo took %v", d)
	}
}

// TestPlainServer: a netconn dialer against a plain net.Listen server
// reconnects plainly, then remembers the address.
func TestPlainServer(t *testing.T) {
	addr := servePlain(t, func(s net.Conn) {
		// A line-protocol server: it rejects what it does not
		// understand (rsock's preface), and echoes otherwise. It looks
		// at the whole preface: the echo's random bytes began with the
		// preface's first byte once in 256 dials, and were rejected.
		first := make([]byte, len(fallback.Preface))
		if _, err := io.ReadFull(s, first); err != nil {
			return
		}
		if bytes.Equal(first, fallback.Preface[:]) {
			s.Write([]byte("-ERR unknown command\r\n"))
			return
		}
		s.Write(first)
		io.Copy(s, s)
	})
	defer plainServers.Forget(addr)
	for i := 0; i < 2; i++ {
		start := time.Now()
		c, err := (&Dialer{Provider: ProviderSoftRoCE}).DialContext(context.Background(), "tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		if transport(c) != "tcp" {
			t.Fatalf("transport %q to a plain server", transport(c))
		}
		if i == 1 && time.Since(start) > time.Second {
			t.Fatalf("second dial took %v: the plain address was not cached", time.Since(start))
		}
		if reason := c.(*Conn).FallbackReason(); reason == "" {
			t.Fatalf("dial %d: no fallback reason", i)
		}
		echoCheckSelf(t, c, 1<<20)
		c.Close()
	}
	if !plainServers.IsPlain(addr) {
		t.Fatal("address not remembered as plain")
	}
}

// echoCheckSelf writes n bytes to an echo server and reads them back.
func echoCheckSelf(t testing.TB, c net.Conn, n int) {
	t.Helper()
	src := make([]byte, n)
	for i := range src {
		src[i] = byte(rand.Uint32())
	}
	go c.Write(src)
	got := make([]byte, n)
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("echo: %v", err)
	}
}

// TestEchoRDMA: 1 MiB echoed over the RDMA path.
func TestEchoRDMA(t *testing.T) {
	ln := listen(t, ListenConfig{})
	c, s := connPair(t, ln, &Dialer{})
	defer c.Close()
	defer s.Close()
	if transport(c) != loopbackTransport() || transport(s) != loopbackTransport() {
		t.Fatalf("transports %q, %q, want %q", transport(c), transport(s), loopbackTransport())
	}
	echoCheck(t, c, s, 1<<20)
}

// TestBigBothWays: 256 MiB cross in each direction at once; SHA-256 of
// what arrives matches what was sent.
func TestBigBothWays(t *testing.T) {
	total := 256 << 20
	if testing.Short() {
		total = 32 << 20
	}
	ln := listen(t, ListenConfig{})
	c, s := connPair(t, ln, &Dialer{})
	defer c.Close()
	defer s.Close()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for i, p := range [][2]net.Conn{{c, s}, {s, c}} {
		w, r := p[0], p[1]
		sums := make(chan []byte, 1)
		wg.Add(2)
		go func(seed uint64) {
			defer wg.Done()
			h := sha256.New()
			rnd := rand.New(rand.NewPCG(seed, seed))
			buf := make([]byte, 256<<10)
			for left := total; left > 0; {
				n := min(left, 1+rnd.IntN(len(buf)))
				for j := 0; j < n; j += 8 {
					x := rnd.Uint64()
					for k := 0; k < 8 && j+k < n; k++ {
						buf[j+k] = byte(x >> (8 * k))
					}
				}
				if _, err := w.Write(buf[:n]); err != nil {
					errs <- err
					return
				}
				h.Write(buf[:n])
				left -= n
			}
			w.(*Conn).CloseWrite()
			sums <- h.Sum(nil)
		}(uint64(i + 1))
		go func() {
			defer wg.Done()
			h := sha256.New()
			n, err := io.Copy(h, r)
			if err != nil || n != int64(total) {
				errs <- fmt.Errorf("received %d bytes: %v", n, err)
				return
			}
			if !bytes.Equal(h.Sum(nil), <-sums) {
				errs <- errors.New("SHA-256 mismatch")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

// TestManyConns: 200 concurrent connections each echo 1 MiB.
func TestManyConns(t *testing.T) {
	conns := 200
	if testing.Short() {
		conns = 50
	}
	// Generous sniff and handshake timeouts: 200 dialers at once under the
	// race detector, on two cores shared with other test binaries, may take
	// longer than the defaults to send their preface and set up their QPs.
	const slow = 30 * time.Second
	// On udp: auto on one host puts only the process's first memif
	// connections on RDMA, and the rest on TCP.
	ln := listen(t, ListenConfig{Link: LinkUDP, Stream: streamSmall, SniffTimeout: 10 * time.Second, HandshakeTimeout: slow})
	var served sync.WaitGroup
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() {
				defer served.Done()
				defer s.Close()
				io.Copy(s, s)
			}()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for i := 0; i < conns; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			d := Dialer{Link: LinkUDP, Stream: streamSmall, HandshakeTimeout: slow}
			c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			if !strings.HasPrefix(transport(c), "rdma") {
				errs <- fmt.Errorf("conn %d on %s: %s", i, transport(c), c.(*Conn).FallbackReason())
				return
			}
			src := make([]byte, 1<<20)
			for j := range src {
				src[j] = byte(i + j)
			}
			go func() {
				c.Write(src)
				c.(*Conn).CloseWrite()
			}()
			got, err := io.ReadAll(c)
			if err != nil || !bytes.Equal(got, src) {
				errs <- fmt.Errorf("conn %d: %d bytes back, %v", i, len(got), err)
			}
		}(i)
	}
	wg.Wait()
	ln.Close()
	served.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestHalfCloseConn: after CloseWrite the peer reads everything, then
// io.EOF, and can still answer.
func TestHalfCloseConn(t *testing.T) {
	for _, p := range []string{ProviderSoftRoCE, ProviderTCP} {
		t.Run(p, func(t *testing.T) {
			ln := listen(t, ListenConfig{SniffTimeout: 20 * time.Millisecond})
			c, s := connPair(t, ln, &Dialer{Provider: p})
			defer c.Close()
			defer s.Close()
			c.Write([]byte("question"))
			if err := c.(*Conn).CloseWrite(); err != nil {
				t.Fatal(err)
			}
			got, err := io.ReadAll(s)
			if err != nil || string(got) != "question" {
				t.Fatalf("server read %q, %v", got, err)
			}
			s.Write([]byte("answer"))
			s.(*Conn).CloseWrite()
			got, err = io.ReadAll(c)
			if err != nil || string(got) != "answer" {
				t.Fatalf("client read %q, %v", got, err)
			}
		})
	}
}

// TestGarbageHandshake: junk after the preface is declined or closed, and
// the listener goes on serving.
func TestGarbageHandshake(t *testing.T) {
	ln := listen(t, ListenConfig{})
	good := &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: "softroce", Link: "udp",
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}, UDPPort: 4791, QPN: 0x11, MTU: 1024, RingAddr: 4096, RingRKey: 1, RingSize: 4096, RecvDepth: 64}
	absurd := *good
	absurd.RingSize = 1 << 31
	wrongVersion := fallback.AppendHello(nil, good)
	wrongVersion[0] ^= 0x7f
	inputs := [][]byte{
		append(fallback.Preface[:], bytes.Repeat([]byte{0xff}, 300)...),
		append(fallback.Preface[:], fallback.AppendHello(nil, good)[:10]...),
		append(fallback.Preface[:], fallback.AppendHello(nil, &absurd)...),
		append(fallback.Preface[:], wrongVersion...),
	}
	for i := 0; i < 20; i++ {
		junk := make([]byte, rand.IntN(200))
		for j := range junk {
			junk[j] = byte(rand.Uint32())
		}
		inputs = append(inputs, append(fallback.Preface[:], junk...))
	}
	for i, in := range inputs {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.Write(in)
		c.(*net.TCPConn).CloseWrite()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		reply, err := fallback.ReadReply(c)
		if err == nil && reply.Accept {
			t.Errorf("input %d accepted", i)
		}
		c.Close()
	}
	// Still serving.
	c, s := connPair(t, ln, &Dialer{})
	echoCheck(t, c, s, 1000)
	c.Close()
	s.Close()
}

func TestProviderKnobs(t *testing.T) {
	t.Setenv(EnvProvider, "bogus")
	if _, err := Dial("tcp", "127.0.0.1:1"); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("bad provider: %v", err)
	}
	t.Setenv(EnvProvider, "tcp")
	ln := listen(t, ListenConfig{Provider: ProviderSoftRoCE, SniffTimeout: 10 * time.Millisecond})
	c, s := connPair(t, ln, &Dialer{})
	if transport(c) != "tcp" {
		t.Fatalf("RSOCK_PROVIDER=tcp dialed %q", transport(c))
	}
	c.Close()
	s.Close()
	t.Setenv(EnvProvider, "")
	t.Setenv(EnvRingSize, "12345")
	if _, err := (&Dialer{}).DialContext(context.Background(), "tcp", ln.Addr().String()); err == nil {
		t.Fatal("a ring size that is not a power of two was accepted")
	}
	if _, err := Dial("udp", "127.0.0.1:1"); err == nil {
		t.Fatal("udp network accepted")
	}
}

// TestPlainEchoServer: a plain echo server sends our preface back; the
// dialer reconnects on TCP but does not remember the address, since an
// rsock listener that gave up sniffing looks the same.
func TestPlainEchoServer(t *testing.T) {
	addr := servePlain(t, func(s net.Conn) { io.Copy(s, s) })
	c, err := Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if transport(c) != "tcp" || !strings.Contains(c.(*Conn).FallbackReason(), "own preface") {
		t.Fatalf("transport %q, reason %q", transport(c), c.(*Conn).FallbackReason())
	}
	echoCheckSelf(t, c, 64<<10)
	if plainServers.IsPlain(addr) {
		t.Fatal("an echo of the preface was cached as a plain server")
	}
}

// TestProviderFailure: a provider that cannot start leaves the conn on
// TCP, on either side, and says why.
func TestProviderFailure(t *testing.T) {
	ln := listen(t, ListenConfig{SniffTimeout: 20 * time.Millisecond})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderRDMACore})
	if transport(c) != "tcp" || transport(s) != "tcp" || !strings.Contains(c.(*Conn).FallbackReason(), "rdmacore") {
		t.Fatalf("dialer without a provider: %q/%q, reason %q", transport(c), transport(s), c.(*Conn).FallbackReason())
	}
	echoCheck(t, c, s, 4096)
	c.Close()
	s.Close()

	ln2 := listen(t, ListenConfig{Provider: ProviderRDMACore})
	c, s = connPair(t, ln2, &Dialer{})
	defer c.Close()
	defer s.Close()
	if transport(c) != "tcp" || transport(s) != "tcp" || !strings.Contains(c.(*Conn).FallbackReason(), "declined") {
		t.Fatalf("listener without a provider: %q/%q, reason %q", transport(c), transport(s), c.(*Conn).FallbackReason())
	}
	echoCheck(t, c, s, 4096)
}

// servePlain runs a plain net.Listen server on loopback that hands each
// connection to handle (and closes it after), until the test ends.
func servePlain(t *testing.T, handle func(net.Conn)) string {
	t.Helper()
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	t.Cleanup(func() { inner.Close(); wg.Wait() })
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			s, err := inner.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer s.Close()
				handle(s)
			}()
		}
	}()
	return inner.Addr().String()
}

// TestLatePreface: a listener whose sniff gives up before the dialer's
// preface arrives (as when the preface is lost on a lossy path and sent
// again after TCP's RTO) resets the connection instead of handing the
// handshake to the application as data; the dialer tries again and ends
// on TCP with its data intact.
func TestLatePreface(t *testing.T) {
	ln := listen(t, ListenConfig{SniffTimeout: time.Nanosecond})
	var mu sync.Mutex
	var firstReads [][]byte
	go func() {
		for {
			s, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer s.Close()
				s.SetDeadline(time.Now().Add(10 * time.Second))
				buf := make([]byte, 64<<10)
				n, err := s.Read(buf)
				mu.Lock()
				firstReads = append(firstReads, append([]byte(nil), buf[:n]...))
				mu.Unlock()
				if err != nil {
					return
				}
				s.Write(buf[:n])
				io.Copy(s, s)
			}()
		}
	}()
	c, err := Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if transport(c) != "tcp" || !strings.Contains(c.(*Conn).FallbackReason(), "did not complete the rsock handshake") {
		t.Fatalf("transport %q, reason %q", transport(c), c.(*Conn).FallbackReason())
	}
	echoCheckSelf(t, c, 4096)
	mu.Lock()
	defer mu.Unlock()
	for _, b := range firstReads {
		if bytes.HasPrefix(b, []byte("RSOCK")) {
			t.Fatalf("the application read the rsock handshake as data: %q", b[:min(len(b), 32)])
		}
	}
}

// TestPendingHandshakesBounded: with every handshake slot held by dialers
// that never confirm, a further dialer waits half the handshake timeout,
// then is declined and served over TCP; once the stalled dialers go
// away, RDMA is back.
func TestPendingHandshakesBounded(t *testing.T) {
	ln := listen(t, ListenConfig{MaxPendingHandshakes: 2, HandshakeTimeout: 4 * time.Second})
	hello := &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: "softroce", Link: "udp",
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}, UDPPort: 4791, QPN: 0x11, MTU: 1024, RingAddr: 4096, RingRKey: 1, RingSize: 4096, RecvDepth: 64}
	var stalled []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if err := fallback.WritePrefaceAndHello(c, hello); err != nil {
			t.Fatal(err)
		}
		// The listener's Accept reply means its slot is taken; this
		// dialer never confirms.
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if r, err := fallback.ReadReply(c); err != nil || !r.Accept {
			t.Fatalf("stalled dialer: %+v, %v", r, err)
		}
		stalled = append(stalled, c)
	}
	c, s := connPair(t, ln, &Dialer{Stream: streamSmall})
	if transport(c) != "tcp" || !strings.Contains(c.(*Conn).FallbackReason(), "busy") || !strings.Contains(s.(*Conn).FallbackReason(), "busy") {
		t.Fatalf("with every slot taken: %q (%q), %q (%q)", transport(c), c.(*Conn).FallbackReason(), transport(s), s.(*Conn).FallbackReason())
	}
	echoCheck(t, c, s, 64<<10)
	c.Close()
	s.Close()
	for _, sc := range stalled {
		sc.Close()
	}
	// The slots free as the listener sees the stalled dialers hang up
	// (or at the latest when their handshakes time out).
	for i := 0; ; i++ {
		c, s := connPair(t, ln, &Dialer{Stream: streamSmall})
		tr := transport(c)
		c.Close()
		s.Close()
		if strings.HasPrefix(tr, "rdma") {
			break
		}
		if i == 500 {
			t.Fatalf("still %q after the stalled dialers left", tr)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowloris: clients that connect and send nothing, or trickle the
// preface and a Hello a byte at a time, do not keep the listener from
// serving others: an rsock dialer and a plain client meanwhile get
// through at once.
func TestSlowloris(t *testing.T) {
	ln := listen(t, ListenConfig{HandshakeTimeout: 3 * time.Second})
	accepted := make(chan net.Conn, 1024)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(accepted)
				return
			}
			accepted <- c
		}
	}()
	hello := &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: "softroce", Link: "udp",
		GID: [16]byte{10: 0xff, 11: 0xff, 12: 127, 15: 1}, UDPPort: 4791, QPN: 0x11, MTU: 1024, RingAddr: 4096, RingRKey: 1, RingSize: 4096, RecvDepth: 64}
	slow := append(fallback.Preface[:], fallback.AppendHello(nil, hello)...)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer wg.Wait()
	defer close(stop)
	for i := range 128 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			defer c.Close() // silent
			continue
		}
		wg.Add(1)
		go func() { // a byte every 20 ms
			defer wg.Done()
			defer c.Close()
			for _, b := range slow {
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if _, err := c.Write([]byte{b}); err != nil {
					return
				}
			}
			<-stop
		}()
	}
	d := &Dialer{Stream: streamSmall, HandshakeTimeout: 2 * time.Second}
	c, err := d.DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if transport(c) != loopbackTransport() {
		t.Fatalf("dialer among slow clients: %q (%q)", transport(c), c.(*Conn).FallbackReason())
	}
	plain, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
	// Among what Accept returns (the silent clients come as plain TCP
	// after the sniff), find both.
	var rdma net.Conn
	gotPlain := false
	deadline := time.After(10 * time.Second)
	for rdma == nil || !gotPlain {
		select {
		case s, ok := <-accepted:
			if !ok {
				t.Fatal("listener closed")
			}
			defer s.Close()
			if transport(s) != "tcp" {
				rdma = s
				continue
			}
			s.SetReadDeadline(time.Now().Add(time.Millisecond))
			b := make([]byte, 3)
			if n, _ := io.ReadFull(s, b); n == 3 && string(b) == "GET" {
				gotPlain = true
			}
		case <-deadline:
			t.Fatalf("after 10 s: rsock conn accepted %v, plain client accepted %v", rdma != nil, gotPlain)
		}
	}
	echoCheck(t, c, rdma, 64<<10)
}
