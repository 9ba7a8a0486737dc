//go:build linux

package hostile

import (
	"context"
	"io"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/netconn"
)

// Slowloris sizes: the stalls per attacking address, and the rsock
// handshakes each address leaves unconfirmed.
const (
	lorisSources   = 4
	lorisStalls    = 700
	lorisHandshake = 20
)

// TestSlowloris attacks a netconn listener from 127.0.0.2-5: first 4x20
// connections that send a whole Hello and never confirm the listener's
// answer (each holds a handshake slot, a queue pair and rings until the
// handshake timeout: 80 for 64 slots), then 4x700 that send the preface
// and the first bytes of a Hello and stall there (2,800 for 1,024 sniffs).
// Meanwhile an rsock dialer (after the first wave and after the second)
// and a plain TCP client (after the second) from 127.0.0.1 must be served
// at once: the rsock dialer connected on RDMA and echoed within 10 s (it
// sheds a stalled handshake of a source holding more slots), the plain
// client echoed within 4 s (the listener never stops accepting, and sheds
// the biggest source's oldest sniffs). The old listener let the
// unconfirmed handshakes keep all 64 slots (the dialer waited 2.5 s and
// was sent to TCP) and stopped accepting with 1,024 sniffs in flight
// (each up to 7 s), so the plain client waited out the stalls.
func TestSlowloris(t *testing.T) {
	var lim syscall.Rlimit
	need := uint64(2*lorisSources*(lorisStalls+lorisHandshake) + 1000)
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Cur < need {
		lim.Cur = min(need, lim.Max)
		syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
		if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); lim.Cur < need {
			t.Skipf("needs %d file descriptors for the attack, RLIMIT_NOFILE is %d", need, lim.Cur)
		}
	}
	ln, err := netconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	var served sync.WaitGroup
	defer func() {
		ln.Close()
		served.Wait()
	}()
	served.Add(1)
	go func() {
		defer served.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			served.Add(1)
			go func() {
				defer served.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()

	var attack []net.Conn
	defer func() {
		for _, c := range attack {
			c.Close()
		}
	}()
	var mu sync.Mutex
	open := func(src netip.Addr, first []byte) bool {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 10 * time.Second}
		c, err := d.Dial("tcp", addr)
		if err != nil {
			t.Errorf("attacker %v: %v", src, err)
			return false
		}
		mu.Lock()
		attack = append(attack, c)
		mu.Unlock()
		if _, err := c.Write(first); err != nil {
			t.Errorf("attacker %v: %v", src, err)
			return false
		}
		return true
	}
	// Unconfirmed handshakes, each Hello naming its sender's own address;
	// then an rsock dialer, which must still find a handshake slot.
	var wg sync.WaitGroup
	for i := range lorisSources {
		src := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)})
		h := &fallback.Hello{
			Version: fallback.Version, Capabilities: fallback.CapStream, Provider: "softroce", Link: "udp",
			GID: netip.AddrFrom4(src.As4()).As16(), UDPPort: 9, QPN: 0x1234, PSN: 1, MTU: 1024,
			RingAddr: 1 << 40, RingRKey: 7, RingSize: 1 << 20, RecvDepth: 64,
		}
		whole := append(fallback.Preface[:], fallback.AppendHello(nil, h)...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range lorisHandshake {
				if !open(src, whole) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	time.Sleep(100 * time.Millisecond) // for the listener to read their Hellos
	rsockServed(t, addr)

	// Stalls mid-Hello (the first bytes of a Hello frame), then a plain
	// client and another rsock dialer.
	h := &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: "softroce", Link: "udp",
		GID: netip.MustParseAddr("::ffff:127.0.0.2").As16(), UDPPort: 9, QPN: 0x1234, PSN: 1, MTU: 1024,
		RingAddr: 1 << 40, RingRKey: 7, RingSize: 1 << 20, RecvDepth: 64}
	partial := append(fallback.Preface[:], fallback.AppendHello(nil, h)[:3]...)
	for i := range lorisSources {
		src := netip.AddrFrom4([4]byte{127, 0, 0, byte(2 + i)})
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range lorisStalls {
				if !open(src, partial) {
					return
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	start := time.Now()
	plain, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	plain.SetDeadline(time.Now().Add(4 * time.Second))
	if _, err := plain.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 18)
	if _, err := io.ReadFull(plain, echo); err != nil {
		t.Fatalf("plain client not served during the attack: %v after %v", err, time.Since(start))
	}
	t.Logf("plain client served after %v", time.Since(start))
	rsockServed(t, addr)
}

// rsockServed dials addr with an rsock dialer from 127.0.0.1, which must
// connect on RDMA and echo within 10 s.
func rsockServed(t *testing.T, addr string) {
	t.Helper()
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := (&netconn.Dialer{}).DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatalf("rsock dialer: %v after %v", err, time.Since(start))
	}
	defer c.Close()
	rc := c.(*netconn.Conn)
	if why := rc.FallbackReason(); why != "" {
		t.Errorf("the rsock dialer is on TCP during the attack: %s", why)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	echo := make([]byte, 4)
	if _, err := io.ReadFull(c, echo); err != nil || string(echo) != "ping" {
		t.Fatalf("rsock echo %q, %v", echo, err)
	}
	t.Logf("rsock dialer served over %s after %v", rc.Transport(), time.Since(start))
}
