//go:build rdmacore

package netconn

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/nettest"

	"github.com/rsock-go/rsock/verbs/rdmacore"
)

// Environment of the device tests, which test/rxe/rdmacore.sh runs in
// qemu guests with rxe.
const (
	// envRDMACoreAddr is a local IP with an rdma-core device (RoCEv2 GID).
	envRDMACoreAddr = "RSOCK_RDMACORE_ADDR"
	// envPeerListen / envPeerDial make TestPeerExchange the server or the
	// client of a two-host exchange.
	envPeerListen = "RSOCK_PEER_LISTEN"
	envPeerDial   = "RSOCK_PEER_DIAL"
	// envPeerBytes is how much each side sends (default 64 MiB).
	envPeerBytes = "RSOCK_PEER_BYTES"
	// envPeerTransport is the prefix the connection's Transport must have.
	envPeerTransport = "RSOCK_PEER_TRANSPORT"
	// envPeerSplice / envPeerConn make TestPeerConn the splicing server or
	// the nettest client of a two-host conformance run.
	envPeerSplice = "RSOCK_PEER_SPLICE"
	envPeerConn   = "RSOCK_PEER_CONN"
)

// guestSniff is the listeners' wait for a dialer's preface in the device
// tests: a dialer opens its device before it sends the preface, and in
// an emulated guest opening an rdma-core device takes longer than the
// default 200 ms.
const guestSniff = 10 * time.Second

// TestAutoWithoutRDMACoreDevice: with rdmacore built in and no device
// for the address (loopback never has one; this host may have no RDMA at
// all), auto runs on soft-RoCE, and rdmacore asked for explicitly falls
// back to TCP saying why.
func TestAutoWithoutRDMACoreDevice(t *testing.T) {
	if !rdmacoreBuiltIn() {
		t.Fatal("the rdmacore provider is not registered")
	}
	devs, err := rdmacore.DeviceList()
	if err != nil {
		t.Fatal(err)
	}
	ln := listen(t, ListenConfig{Provider: ProviderAuto, Link: LinkUDP})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderAuto, Link: LinkUDP})
	defer c.Close()
	defer s.Close()
	if transport(c) != trUDP || transport(s) != trUDP {
		t.Fatalf("auto without an rdma-core device: %q, %q, want %q", transport(c), transport(s), trUDP)
	}
	// On a host without RDMA devices auto keeps quiet; with devices (none
	// has 127.0.0.1) it says why it passed over rdmacore.
	for _, cn := range []net.Conn{c, s} {
		why := cn.(*Conn).FallbackReason()
		if len(devs) == 0 && why != "" || len(devs) > 0 && !strings.Contains(why, "rdmacore") {
			t.Errorf("%d devices; FallbackReason %q", len(devs), why)
		}
	}
	t.Logf("%d rdma-core devices; transport %s; reason %q", len(devs), transport(c), c.(*Conn).FallbackReason())
	echoCheck(t, c, s, 256<<10)

	c2, s2 := connPair(t, ln, &Dialer{Provider: ProviderRDMACore})
	defer c2.Close()
	defer s2.Close()
	if transport(c2) != "tcp" || !strings.Contains(c2.(*Conn).FallbackReason(), "rdmacore") {
		t.Fatalf("rdmacore without a device: %q, reason %q", transport(c2), c2.(*Conn).FallbackReason())
	}
	echoCheck(t, c2, s2, 4096)
}

// TestLinksInteroperate: soft-RoCE's udp link and rdma-core devices speak
// the same RoCEv2; memif does not reach either.
func TestLinksInteroperate(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"udp", "udp", true}, {"udp", "roce", true}, {"roce", "udp", true}, {"roce", "roce", true},
		{"memif", "roce", false}, {"roce", "memif", false}, {"memif", "memif", true},
	} {
		if got := linksInteroperate(tc.a, tc.b); got != tc.want {
			t.Errorf("linksInteroperate(%s, %s) = %v", tc.a, tc.b, got)
		}
	}
}

// rdmacoreAddr returns the local IP of the device tests, or skips.
func rdmacoreAddr(t *testing.T) netip.Addr {
	t.Helper()
	s := os.Getenv(envRDMACoreAddr)
	if s == "" {
		t.Skipf("%s is not set: run test/rxe/rdmacore.sh for the tests on an rdma-core device", envRDMACoreAddr)
	}
	ip, err := netip.ParseAddr(s)
	if err != nil {
		t.Fatalf("%s=%q: %v", envRDMACoreAddr, s, err)
	}
	return ip
}

// TestRDMACoreConn runs nettest's conformance tests and a 1 MiB echo over
// connections on an rdma-core device, both ends in this process (through
// the device's loopback).
func TestRDMACoreConn(t *testing.T) {
	ip := rdmacoreAddr(t)
	lc := ListenConfig{Provider: ProviderRDMACore, HandshakeTimeout: 30 * time.Second, SniffTimeout: guestSniff}
	ln, err := lc.Listen(context.Background(), "tcp", netip.AddrPortFrom(ip, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	d := &Dialer{Provider: ProviderRDMACore, HandshakeTimeout: 30 * time.Second}
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c, s := connPair(t, ln, d)
		if !strings.HasPrefix(transport(c), "rdma/rdmacore/") || !strings.HasPrefix(transport(s), "rdma/rdmacore/") {
			return nil, nil, nil, fmt.Errorf("transports %q (%s), %q (%s)", transport(c), c.(*Conn).FallbackReason(), transport(s), s.(*Conn).FallbackReason())
		}
		return c, s, func() { c.Close(); s.Close() }, nil
	})
	c, s := connPair(t, ln, d)
	defer c.Close()
	defer s.Close()
	t.Logf("transport %s", transport(c))
	echoCheck(t, c, s, 1<<20)
}

// TestPeerConn runs nettest's conformance tests across two hosts: the
// server (envPeerSplice) splices the connections it accepts in pairs, so
// the client (envPeerConn) gets both ends of a pipe through the peer, each
// an rsock connection with the environment's provider.
func TestPeerConn(t *testing.T) {
	if addr := os.Getenv(envPeerSplice); addr != "" {
		spliceServer(t, addr)
		return
	}
	addr := os.Getenv(envPeerConn)
	if addr == "" {
		t.Skipf("neither %s nor %s is set: test/rxe/rdmacore.sh runs this between two hosts", envPeerSplice, envPeerConn)
	}
	d := &Dialer{HandshakeTimeout: 30 * time.Second}
	dial := func() (net.Conn, error) {
		c, err := d.DialContext(context.Background(), "tcp", addr)
		if err != nil {
			return nil, err
		}
		if want := os.Getenv(envPeerTransport); !strings.HasPrefix(transport(c), want) {
			c.Close()
			return nil, fmt.Errorf("transport %q (%s), want %q", transport(c), c.(*Conn).FallbackReason(), want)
		}
		return c, nil
	}
	nettest.TestConn(t, func() (net.Conn, net.Conn, func(), error) {
		c1, err := dial()
		if err != nil {
			return nil, nil, nil, err
		}
		c2, err := dial()
		if err != nil {
			c1.Close()
			return nil, nil, nil, err
		}
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}

// spliceServer accepts connections in pairs and copies each one's bytes
// to the other, passing a half-close on; it returns once no connection
// came for 30 s after the last pair ended.
func spliceServer(t *testing.T, addr string) {
	lc := ListenConfig{HandshakeTimeout: 30 * time.Second, SniffTimeout: guestSniff}
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	fmt.Printf("splice server on %v\n", ln.Addr())
	var wg sync.WaitGroup
	defer wg.Wait()
	pairs := 0
	for {
		var pair [2]net.Conn
		for i := range pair {
			timer := time.AfterFunc(30*time.Second, func() { ln.Close() })
			c, err := ln.Accept()
			timer.Stop()
			if err != nil {
				if pair[0] != nil {
					pair[0].Close()
				}
				t.Logf("spliced %d pairs; accept: %v", pairs, err)
				if pairs == 0 {
					t.Fatal("no client came")
				}
				return
			}
			if want := os.Getenv(envPeerTransport); !strings.HasPrefix(transport(c), want) {
				t.Errorf("transport %q (%s), want %q", transport(c), c.(*Conn).FallbackReason(), want)
			}
			pair[i] = c
		}
		pairs++
		wg.Add(1)
		go func() {
			defer wg.Done()
			splice(pair[0], pair[1])
		}()
	}
}

// splice copies a and b into each other until both directions end.
func splice(a, b net.Conn) {
	var wg sync.WaitGroup
	half := func(dst, src net.Conn) {
		defer wg.Done()
		_, err := io.Copy(dst, src)
		if err != nil {
			// A reset on one side resets the other.
			a.Close()
			b.Close()
			return
		}
		dst.(*Conn).CloseWrite()
	}
	wg.Add(2)
	go half(a, b)
	go half(b, a)
	wg.Wait()
	a.Close()
	b.Close()
}

// TestPeerExchange moves envPeerBytes (64 MiB) each way at once between
// two hosts, a deterministic pseudo-random stream per direction, and
// compares the SHA-256 of what arrived with that of what was sent. The
// server (envPeerListen) accepts one connection; the client dials
// envPeerDial. Each side uses the environment's provider ($RSOCK_PROVIDER).
func TestPeerExchange(t *testing.T) {
	listenAddr, dialAddr := os.Getenv(envPeerListen), os.Getenv(envPeerDial)
	if listenAddr == "" && dialAddr == "" {
		t.Skipf("neither %s nor %s is set: test/rxe/rdmacore.sh runs this between two hosts", envPeerListen, envPeerDial)
	}
	total := 64 << 20
	if v := os.Getenv(envPeerBytes); v != "" {
		var err error
		if total, err = strconv.Atoi(v); err != nil {
			t.Fatalf("%s=%q: %v", envPeerBytes, v, err)
		}
	}
	var c net.Conn
	var err error
	mySeed, peerSeed := uint64(1), uint64(2) // the client's stream, the server's
	if listenAddr != "" {
		mySeed, peerSeed = peerSeed, mySeed
		lc := ListenConfig{HandshakeTimeout: 30 * time.Second, SniffTimeout: guestSniff}
		var ln net.Listener
		if ln, err = lc.Listen(context.Background(), "tcp", listenAddr); err != nil {
			t.Fatal(err)
		}
		fmt.Printf("exchange server on %v\n", ln.Addr())
		timer := time.AfterFunc(5*time.Minute, func() { ln.Close() })
		c, err = ln.Accept()
		timer.Stop()
		ln.Close()
	} else {
		d := &Dialer{HandshakeTimeout: 30 * time.Second}
		for range 60 { // the server may still be starting
			if c, err = d.DialContext(context.Background(), "tcp", dialAddr); err == nil || !errors.Is(err, syscall.ECONNREFUSED) {
				break
			}
			time.Sleep(time.Second)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tr := transport(c)
	t.Logf("transport %s (%s); %d bytes each way", tr, c.(*Conn).FallbackReason(), total)
	if want := os.Getenv(envPeerTransport); !strings.HasPrefix(tr, want) {
		t.Fatalf("transport %q (%s), want prefix %q", tr, c.(*Conn).FallbackReason(), want)
	}
	start := time.Now()
	sent := make(chan []byte, 1)
	werr := make(chan error, 1)
	go func() {
		h := sha256.New()
		rnd := rand.New(rand.NewPCG(mySeed, mySeed))
		buf := make([]byte, 256<<10)
		for left := total; left > 0; {
			n := min(left, 1+rnd.IntN(len(buf)))
			fillStream(rnd, buf[:n])
			if _, err := c.Write(buf[:n]); err != nil {
				werr <- err
				return
			}
			h.Write(buf[:n])
			left -= n
		}
		werr <- c.(*Conn).CloseWrite()
		sent <- h.Sum(nil)
	}()
	got := sha256.New()
	n, err := io.Copy(got, c)
	if err != nil || n != int64(total) {
		t.Fatalf("received %d of %d bytes: %v", n, total, err)
	}
	if err := <-werr; err != nil {
		t.Fatalf("send: %v", err)
	}
	// What the peer should have sent: the same generator with its seed.
	want := sha256.New()
	rnd := rand.New(rand.NewPCG(peerSeed, peerSeed))
	buf := make([]byte, 256<<10)
	for left := total; left > 0; {
		n := min(left, 1+rnd.IntN(len(buf)))
		fillStream(rnd, buf[:n])
		want.Write(buf[:n])
		left -= n
	}
	if !bytes.Equal(got.Sum(nil), want.Sum(nil)) {
		t.Fatalf("received SHA-256 %x, the peer's stream has %x", got.Sum(nil), want.Sum(nil))
	}
	el := time.Since(start)
	fmt.Printf("exchange %s: sent %d bytes sha256 %s, received %d bytes sha256 %s (matches the peer's stream), %.1f s, %.2f MB/s each way\n",
		tr, total, hex.EncodeToString((<-sent)), n, hex.EncodeToString(got.Sum(nil)), el.Seconds(), float64(total)/el.Seconds()/1e6)
}

// fillStream fills b from rnd, 8 bytes per draw.
func fillStream(rnd *rand.Rand, b []byte) {
	for j := 0; j < len(b); j += 8 {
		x := rnd.Uint64()
		for k := 0; k < 8 && j+k < len(b); k++ {
			b[j+k] = byte(x >> (8 * k))
		}
	}
}
