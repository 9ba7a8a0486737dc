//go:build linux

package netconn

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// tcpSockets counts this process's descriptors that are TCP sockets.
func tcpSockets(t *testing.T) int {
	t.Helper()
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/self/net/tcp", "/proc/self/net/tcp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			if fs := strings.Fields(line); len(fs) > 9 {
				inodes["socket:["+fs[9]+"]"] = true
			}
		}
	}
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, fd := range fds {
		if l, err := os.Readlink("/proc/self/fd/" + fd.Name()); err == nil && inodes[l] {
			n++
		}
	}
	return n
}

// TestShmNoControlConn: once both sides confirmed, an shm connection
// holds no TCP descriptor and no goroutine of its own on either side,
// and keeps its addresses and deadlines.
func TestShmNoControlConn(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c0, s0 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c0.Close()
	defer s0.Close()
	socks, goroutines := tcpSockets(t), runtime.NumGoroutine()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	const n = 16
	for range n {
		c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
		conns = append(conns, c, s)
		if transport(c) != trShm || transport(s) != trShm {
			t.Fatalf("transports %q, %q", transport(c), transport(s))
		}
		if c.LocalAddr().String() != s.RemoteAddr().String() || c.RemoteAddr().String() != s.LocalAddr().String() || c.RemoteAddr().String() != ln.Addr().String() {
			t.Fatalf("addresses %v→%v, %v←%v", c.LocalAddr(), c.RemoteAddr(), s.RemoteAddr(), s.LocalAddr())
		}
	}
	// Sockets closing on the other side may linger a moment.
	deadline := time.Now().Add(5 * time.Second)
	for tcpSockets(t) > socks && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := tcpSockets(t); got > socks {
		t.Errorf("%d TCP sockets after %d more shm connections, %d before", got, n, socks)
	}
	if g := runtime.NumGoroutine(); g > goroutines+2 {
		t.Errorf("%d goroutines after %d more shm connections, %d before", g, n, goroutines)
	}
	for i := 0; i < len(conns); i += 2 {
		echoCheck(t, conns[i], conns[i+1], 4<<10)
	}
	c := conns[0]
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past the deadline: %v", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}

// TestShmListenerFailsAfterConfirm: a listener whose handshake fails
// after the dialer confirmed destroys its queue pair; the dialer's
// connection, which has no control connection, fails with ECONNRESET at
// once (no hang).
func TestShmListenerFailsAfterConfirm(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c0, s0 := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall}) // a first one on the channel
	defer c0.Close()
	defer s0.Close()
	defer func(f func() error) { failAfterConfirm = f }(failAfterConfirm)
	for _, reuse := range []bool{true, false} {
		if !reuse {
			closeIdleShmChannels()
			c0.Close()
			s0.Close()
			closeIdleShmChannels()
		}
		failed := make(chan struct{})
		failAfterConfirm = func() error {
			close(failed)
			return errors.New("injected failure after the confirm")
		}
		c, err := (&Dialer{Link: LinkAuto, Stream: streamSmall}).DialContext(context.Background(), "tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		<-failed
		failAfterConfirm = func() error { return nil }
		if transport(c) != trShm {
			c.Close()
			t.Fatalf("reuse %v: dialed on %q (%q)", reuse, transport(c), c.(*Conn).FallbackReason())
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		start := time.Now()
		_, err = c.Read(make([]byte, 1))
		if !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reuse %v: read on a connection the listener gave up: %v, want ECONNRESET", reuse, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("reuse %v: the read failed %v after it started", reuse, d)
		}
		if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("reuse %v: write: %v, want ECONNRESET", reuse, err)
		}
		c.Close()
	}
}

// TestShmPeerClosesInOrder: a peer that closes in order (its CLOSE, then
// its queue pair destroyed) leaves its data readable up to io.EOF, and
// a write fails with EPIPE as after a TCP peer's close, not with
// ECONNRESET.
func TestShmPeerClosesInOrder(t *testing.T) {
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c.Close()
	if transport(c) != trShm {
		t.Fatalf("transport %q", transport(c))
	}
	if _, err := s.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "bye" {
		t.Fatalf("read %q, %v; want bye and io.EOF", got, err)
	}
	if _, err := c.Write([]byte("x")); !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after the peer closed: %v, want EPIPE", err)
	}
	if err := c.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
