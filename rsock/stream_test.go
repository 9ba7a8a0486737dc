//go:build linux

package rsock

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/net/nettest"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

func TestMain(m *testing.M) {
	if spec := os.Getenv(peerEnv); spec != "" {
		runPeer(spec)
	}
	goleak.VerifyTestMain(m)
}

// testDev is a soft-RoCE device on loopback UDP.
type testDev struct {
	dev *softroce.Device
}

func newTestDev(t testing.TB) *testDev {
	t.Helper()
	l, err := udp.Listen(udp.Config{Addr: netip.MustParseAddrPort("127.0.0.1:0"), StrictICRC: true})
	if err != nil {
		t.Fatal(err)
	}
	d, err := softroce.Open(softroce.Config{Link: l})
	if err != nil {
		t.Fatal(err)
	}
	return &testDev{dev: d}
}

// streamPair connects two streams across two devices.
func streamPair(t testing.TB, a, b *testDev, cfg Config) (*Stream, *Stream) {
	t.Helper()
	ea, err := NewEndpoint(a.dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	eb, err := NewEndpoint(b.dev, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return connectEndpoints(t, ea, eb)
}

// connectEndpoints connects two endpoints to each other, each with the
// other's Params as a handshake would pass them.
func connectEndpoints(t testing.TB, ea, eb *Endpoint) (*Stream, *Stream) {
	t.Helper()
	addrA := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
	addrB := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
	sa, err := ea.Connect(eb.Params(), ConnectOptions{Net: "tcp", LocalAddr: addrA, RemoteAddr: addrB})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := eb.Connect(ea.Params(), ConnectOptions{Net: "tcp", LocalAddr: addrB, RemoteAddr: addrA})
	if err != nil {
		t.Fatal(err)
	}
	return sa, sb
}

// sendVerified writes n random bytes (from seed) on sa and checks that
// sb reads them back intact.
func sendVerified(t testing.TB, sa, sb *Stream, n int, seed uint64) {
	t.Helper()
	data := make([]byte, n)
	verbstest.FillRandom(rand.New(rand.NewPCG(seed, seed+1)), data)
	errc := make(chan error, 1)
	go func() {
		_, err := sa.Write(data)
		errc <- err
	}()
	got := make([]byte, n)
	if _, err := io.ReadFull(sb, got); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("data differs")
	}
}

func devPair(t testing.TB) (*testDev, *testDev) {
	a, b := newTestDev(t), newTestDev(t)
	t.Cleanup(func() { a.dev.Close(); b.dev.Close() })
	return a, b
}

// TestNetConn runs x/net's net.Conn conformance suite over a stream.
func TestNetConn(t *testing.T) {
	a, b := devPair(t)
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		sa, sb := streamPair(t, a, b, Config{RingSize: 64 << 10})
		return sa, sb, func() { sa.Close(); sb.Close() }, nil
	})
}

// TestBothWays moves random bytes in both directions at once through
// small and large rings, with writes larger than the ring.
func TestBothWays(t *testing.T) {
	a, b := devPair(t)
	for _, rs := range []int{4 << 10, 64 << 10, 1 << 20, 4 << 20} {
		t.Run(fmt.Sprint(rs), func(t *testing.T) {
			total := 32 << 20
			if testing.Short() || rs == 4<<10 {
				total = 4 << 20
			}
			sa, sb := streamPair(t, a, b, Config{RingSize: rs})
			defer sa.Close()
			defer sb.Close()
			var wg sync.WaitGroup
			errs := make(chan error, 4)
			for i, pair := range [][2]*Stream{{sa, sb}, {sb, sa}} {
				w, r := pair[0], pair[1]
				seed := uint64(i)
				wg.Add(2)
				sum := make(chan []byte, 1)
				go func() {
					defer wg.Done()
					h := sha256.New()
					rnd := rand.New(rand.NewPCG(seed, 9))
					buf := make([]byte, 3*rs+17)
					for left := total; left > 0; {
						n := min(left, 1+rnd.IntN(len(buf)))
						for j := range buf[:n] {
							buf[j] = byte(rnd.Uint32())
						}
						if _, err := w.Write(buf[:n]); err != nil {
							errs <- err
							return
						}
						h.Write(buf[:n])
						left -= n
					}
					if err := w.CloseWrite(); err != nil {
						errs <- err
					}
					sum <- h.Sum(nil)
				}()
				go func() {
					defer wg.Done()
					h := sha256.New()
					got, err := io.Copy(h, r)
					if err != nil || got != int64(total) {
						errs <- fmt.Errorf("read %d bytes: %v", got, err)
						return
					}
					if want := <-sum; !bytes.Equal(h.Sum(nil), want) {
						errs <- errors.New("SHA-256 differs")
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
		})
	}
}

// TestHalfClose: after CloseWrite the peer reads everything then EOF, and
// can still write back.
func TestHalfClose(t *testing.T) {
	a, b := devPair(t)
	sa, sb := streamPair(t, a, b, Config{})
	defer sa.Close()
	defer sb.Close()
	if _, err := sa.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := sa.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Write([]byte("x")); err == nil {
		t.Fatal("write after CloseWrite succeeded")
	}
	got, err := io.ReadAll(sb)
	if err != nil || string(got) != "request" {
		t.Fatalf("read %q, %v", got, err)
	}
	if _, err := sb.Write([]byte("response")); err != nil {
		t.Fatal(err)
	}
	sb.CloseWrite()
	got, err = io.ReadAll(sa)
	if err != nil || string(got) != "response" {
		t.Fatalf("read back %q, %v", got, err)
	}
}

// TestSlowReader: the writer blocks on a full ring; nothing is lost.
func TestSlowReader(t *testing.T) {
	a, b := devPair(t)
	sa, sb := streamPair(t, a, b, Config{RingSize: 4 << 10})
	defer sa.Close()
	defer sb.Close()
	sa.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	n, err := sa.Write(make([]byte, 1<<20))
	if !errors.Is(err, os.ErrDeadlineExceeded) || n >= 1<<20 {
		t.Fatalf("write to a reader that does not read: %d, %v", n, err)
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("deadline error %v is not a timeout net.Error", err)
	}
	if n > 4<<10 {
		t.Fatalf("wrote %d bytes into a 4 KiB ring", n)
	}
	sa.SetWriteDeadline(time.Time{})
	buf := make([]byte, n)
	if _, err := io.ReadFull(sb, buf); err != nil {
		t.Fatal(err)
	}
}

// TestPeerVanishes: when the peer's device disappears, reads and writes
// fail within a few seconds.
func TestPeerVanishes(t *testing.T) {
	a, b := devPair(t)
	sa, _ := streamPair(t, a, b, Config{AckTimeout: 12, RetryCount: 3})
	defer sa.Close()
	b.dev.Close()
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		_, err := sa.Read(make([]byte, 10))
		errc <- err
	}()
	var err error
	for err == nil && time.Since(start) < 10*time.Second {
		_, err = sa.Write(make([]byte, 64<<10))
	}
	if err == nil {
		t.Fatal("writes to a vanished peer kept succeeding")
	}
	select {
	case rerr := <-errc:
		if rerr == nil {
			t.Fatal("read succeeded")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("read still blocked 5 s after the peer vanished")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("took %v to notice", d)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) {
		t.Fatalf("error %T is not *net.OpError", err)
	}
}

func TestCloseIdempotent(t *testing.T) {
	a, b := devPair(t)
	sa, sb := streamPair(t, a, b, Config{})
	done := make(chan error, 1)
	go func() {
		_, err := sa.Read(make([]byte, 1))
		done <- err
	}()
	time.Sleep(10 * time.Millisecond)
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sa.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("pending read after Close: %v", err)
	}
	// The peer sees EOF.
	if _, err := sb.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("peer read after close: %v", err)
	}
	if _, err := sb.Write([]byte("x")); err == nil {
		t.Fatal("write to a closed peer succeeded")
	}
	sb.Close()
}

func TestParamsValidate(t *testing.T) {
	good := Params{GID: verbs.GIDFromAddr(netip.MustParseAddr("127.0.0.1")), QPN: 0x11, PSN: 5, MTU: 1024, RingSize: 4096, RecvDepth: 64}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	if p := good; func() error { p.PacketMTU = 1408; return p.Validate() }() != nil {
		t.Fatal("packet MTU 1408 refused")
	}
	for name, f := range map[string]func(p *Params){
		"qpn":                  func(p *Params) { p.QPN = 1 << 24 },
		"psn":                  func(p *Params) { p.PSN = 1 << 24 },
		"mtu":                  func(p *Params) { p.MTU = 1000 },
		"packet mtu small":     func(p *Params) { p.PacketMTU = 192 },
		"packet mtu unaligned": func(p *Params) { p.PacketMTU = 1400 },
		"packet mtu large":     func(p *Params) { p.PacketMTU = 8192 },
		"ring":                 func(p *Params) { p.RingSize = 1 << 30 },
		"depth":                func(p *Params) { p.RecvDepth = 1 },
		"gid":                  func(p *Params) { p.GID = verbs.GID{} },
	} {
		p := good
		f(&p)
		if p.Validate() == nil {
			t.Errorf("%s accepted", name)
		}
	}
}

// TestWriteAfterPeerClose: once the peer closed, a writer blocked on a
// full ring, and later writes and CloseWrite, return instead of hanging.
func TestWriteAfterPeerClose(t *testing.T) {
	a, b := devPair(t)
	sa, sb := streamPair(t, a, b, Config{RingSize: 4 << 10})
	defer sa.Close()
	errc := make(chan error, 1)
	go func() {
		_, err := sa.Write(make([]byte, 1<<20)) // fills the peer's ring, then blocks
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond)
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errc:
		if !errors.Is(err, syscall.EPIPE) {
			t.Fatalf("blocked write after the peer closed: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("write still blocked 5 s after the peer closed")
	}
	if _, err := sa.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after the peer closed: %v", err)
	}
	if err := sa.CloseWrite(); err != nil {
		t.Fatalf("CloseWrite after the peer closed: %v", err)
	}
}

// TestCloseWhileReceiving: a stream closed while its peer still writes
// sends CLOSE as its last message. The peer tears its queue pair down as
// soon as CLOSE arrives, so a credit update sent after it would never be
// acknowledged, and Close would wait for it until CloseTimeout and fail.
func TestCloseWhileReceiving(t *testing.T) {
	a, b := devPair(t)
	for i := range 30 {
		sa, sb := streamPair(t, a, b, Config{RingSize: 16 << 10, CloseTimeout: time.Second})
		werr := make(chan error, 1)
		go func() {
			msg := make([]byte, 64)
			for {
				if _, err := sb.Write(msg); err != nil {
					werr <- err
					sb.Close()
					return
				}
			}
		}()
		if _, err := io.ReadFull(sa, make([]byte, 64<<10)); err != nil {
			t.Fatal(err)
		}
		if err := sa.Close(); err != nil {
			t.Fatalf("round %d: Close while the peer writes: %v", i, err)
		}
		if err := <-werr; !errors.Is(err, syscall.EPIPE) && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("round %d: the writer's error after the peer closed: %v", i, err)
		}
	}
}
