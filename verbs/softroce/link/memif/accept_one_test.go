//go:build linux

package memif

import (
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

type acceptResult struct {
	l   *Link
	err error
}

// acceptOne runs AcceptOne on a fresh abstract socket with cfg.
func acceptOne(t *testing.T, cfg Config) (*Listener, string, chan acceptResult) {
	t.Helper()
	name := "@rsock-memif-test-" + t.Name() + "-" + strconv.Itoa(os.Getpid())
	cfg.Local = addrA
	ln, err := Listen(name, testSecret, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	ch := make(chan acceptResult, 1)
	go func() {
		l, err := ln.AcceptOne()
		ch <- acceptResult{l, err}
	}()
	return ln, name, ch
}

// stall connects to name and sends nothing.
func stall(t *testing.T, name string) {
	t.Helper()
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: name, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
}

// TestAcceptOneNotSpoiled: 100 clients with wrong secrets, then 20 that
// connect and stall (more than AcceptOne serves at once), then the real
// client: it connects, and AcceptOne returns its link. (The offer of
// netconn used to end after 8 failed handshakes, and served one client at
// a time.)
func TestAcceptOneNotSpoiled(t *testing.T) {
	_, name, ch := acceptOne(t, Config{HandshakeTimeout: 20 * time.Second})
	for i := range 100 {
		_, err := Dial(name, "wrong-secret-"+strconv.Itoa(i), Config{Local: addrB, Log2RingSize: 4})
		var de *DisconnectError
		if !errors.As(err, &de) {
			t.Fatalf("wrong secret %d: %v, want a DISCONNECT", i, err)
		}
	}
	for range 20 {
		stall(t, name)
	}
	cli, err := Dial(name, testSecret, Config{Local: addrB, Log2RingSize: 4, HandshakeTimeout: 5 * time.Second})
	if err != nil {
		t.Fatalf("the real client: %v", err)
	}
	defer cli.Close()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatal(r.err)
		}
		r.l.Close()
	case <-time.After(10 * time.Second):
		t.Fatal("AcceptOne did not return the link")
	}
	// The listener is closed: nobody else gets in.
	if c, err := Dial(name, testSecret, Config{Local: addrB, Log2RingSize: 4, HandshakeTimeout: time.Second}); err == nil {
		c.Close()
		t.Fatal("a second client connected after the first")
	}
}

// TestAcceptOneCheckPeer: clients that CheckPeer refuses are closed before
// any message (their Dial fails without a HELLO), and do not end the
// wait; the next client passes.
func TestAcceptOneCheckPeer(t *testing.T) {
	var n atomic.Int32
	refuse := errors.New("not the peer")
	_, name, ch := acceptOne(t, Config{CheckPeer: func(*net.UnixConn) error {
		if n.Add(1) <= 5 {
			return refuse
		}
		return nil
	}})
	for i := range 5 {
		if c, err := Dial(name, testSecret, Config{Local: addrB, Log2RingSize: 4, HandshakeTimeout: 2 * time.Second}); err == nil {
			c.Close()
			t.Fatalf("client %d refused by CheckPeer connected", i)
		}
	}
	cli, err := Dial(name, testSecret, Config{Local: addrB, Log2RingSize: 4})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	r.l.Close()
}

// TestAcceptOneClosed: closing the listener with clients in the middle
// of the handshake ends AcceptOne with an error naming the last refusal,
// and closes them (no goroutine is left: goleak).
func TestAcceptOneClosed(t *testing.T) {
	ln, name, ch := acceptOne(t, Config{HandshakeTimeout: 20 * time.Second})
	if _, err := Dial(name, "wrong", Config{Local: addrB, Log2RingSize: 4}); err == nil {
		t.Fatal("wrong secret accepted")
	}
	for range 3 {
		stall(t, name)
	}
	time.Sleep(50 * time.Millisecond)
	ln.Close()
	select {
	case r := <-ch:
		if r.err == nil || r.l != nil || !strings.Contains(r.err.Error(), "incorrect secret") {
			t.Fatalf("AcceptOne after Close: %v, %v; want an error naming the wrong secret", r.l, r.err)
		}
		t.Log(r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("AcceptOne did not return after Close")
	}
}

// TestDialCheckPeer: a client whose CheckPeer refuses the server does not
// connect, and says why.
func TestDialCheckPeer(t *testing.T) {
	ln, name, _ := acceptOne(t, Config{})
	defer ln.Close()
	refuse := errors.New("not the peer")
	_, err := Dial(name, testSecret, Config{Local: addrB, CheckPeer: func(*net.UnixConn) error { return refuse }})
	if !errors.Is(err, refuse) {
		t.Fatalf("Dial: %v, want %v", err, refuse)
	}
}
