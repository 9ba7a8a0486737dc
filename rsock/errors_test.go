//go:build linux

package rsock

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestConnLostIsECONNRESET: a stream whose peer vanished fails reads and
// writes with a *net.OpError wrapping syscall.ECONNRESET, as package net
// reports a connection the network lost.
func TestConnLostIsECONNRESET(t *testing.T) {
	a, b := devPair(t)
	sa, _ := streamPair(t, a, b, Config{AckTimeout: 12, RetryCount: 2})
	defer sa.Close()
	b.dev.Close()
	var err error
	for deadline := time.Now().Add(10 * time.Second); err == nil && time.Now().Before(deadline); {
		_, err = sa.Write(make([]byte, 64<<10))
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("write to a vanished peer: %v (%T), want a write *net.OpError wrapping ECONNRESET", err, err)
	}
	_, err = sa.Read(make([]byte, 1))
	if !errors.As(err, &oe) || oe.Op != "read" || !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("read from a vanished peer: %v, want a read *net.OpError wrapping ECONNRESET", err)
	}
}

// TestWriteAfterShutdownIsEPIPE: writes after the peer closed, and after
// our own CloseWrite, fail with a *net.OpError wrapping EPIPE.
func TestWriteAfterShutdownIsEPIPE(t *testing.T) {
	a, b := devPair(t)
	sa, sb := streamPair(t, a, b, Config{})
	defer sa.Close()
	if err := sb.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sa.Read(make([]byte, 1)); err == nil {
		t.Fatal("read after the peer closed returned data")
	}
	var oe *net.OpError
	if _, err := sa.Write([]byte("x")); !errors.As(err, &oe) || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after the peer closed: %v", err)
	}

	sc, sd := streamPair(t, a, b, Config{})
	defer sc.Close()
	defer sd.Close()
	if err := sc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.Write([]byte("x")); !errors.As(err, &oe) || !errors.Is(err, syscall.EPIPE) {
		t.Fatalf("write after CloseWrite: %v", err)
	}
}

// TestCloseReportsUnacknowledged: Close of a healthy stream whose data the
// peer never acknowledged within CloseTimeout reports it, as a close
// *net.OpError wrapping os.ErrDeadlineExceeded, and keeps reporting it;
// Close frees everything all the same (goleak checks the goroutines).
func TestCloseReportsUnacknowledged(t *testing.T) {
	a, b := devPair(t)
	// An ACK timeout of about 4 s: the transport does not give up on the
	// peer before Close does.
	sa, _ := streamPair(t, a, b, Config{CloseTimeout: 200 * time.Millisecond, AckTimeout: 20})
	b.dev.Close()
	if _, err := sa.Write(make([]byte, 32<<10)); err != nil {
		t.Fatal(err)
	}
	err := sa.Close()
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "close" || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("Close with unacknowledged data: %v, want a close *net.OpError wrapping os.ErrDeadlineExceeded", err)
	}
	if again := sa.Close(); again != err {
		t.Fatalf("second Close: %v, want the first one's error", again)
	}
}
