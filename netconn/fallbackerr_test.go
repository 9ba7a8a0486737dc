package netconn

import (
	"errors"
	"strings"
	"testing"
)

// TestFallbackErrorTyped: a conn's reason is a *FallbackError that
// errors.As finds, with the kind and the side that decided, on both ends;
// the snapshot counts it under its kind.
func TestFallbackErrorTyped(t *testing.T) {
	before := Snapshot().Fallbacks
	ln := listen(t, ListenConfig{Provider: ProviderTCP})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE, Link: LinkUDP})
	defer c.Close()
	defer s.Close()
	for _, end := range []struct {
		name string
		conn *Conn
	}{{"dialer", c.(*Conn)}, {"listener", s.(*Conn)}} {
		var fe *FallbackError
		if !errors.As(end.conn.FallbackError(), &fe) || fe.Kind != FallbackRDMAOff || fe.Side != SideListener {
			t.Errorf("%s: FallbackError %#v, want kind %s decided by the listener", end.name, end.conn.FallbackError(), FallbackRDMAOff)
			continue
		}
		if end.conn.FallbackReason() != fe.Error() || !strings.Contains(fe.Error(), "RDMA is turned off") {
			t.Errorf("%s: FallbackReason %q, error %q", end.name, end.conn.FallbackReason(), fe.Error())
		}
	}
	if got := Snapshot().Fallbacks[FallbackRDMAOff] - before[FallbackRDMAOff]; got != 2 {
		t.Errorf("%d fallbacks of kind %s counted, want 2", got, FallbackRDMAOff)
	}
	echoCheck(t, c, s, 4096)
}

// TestAutoSameHostWithoutMemif: on one host, when memif cannot be set up
// (here the process has its most memif connections), auto runs on TCP,
// not on the udp link (slower than TCP on one host), sends no preface,
// and says why; the snapshot counts kind no_fast_path.
func TestAutoSameHostWithoutMemif(t *testing.T) {
	noShm(t)
	defer func(n int64) { maxMemifConns = n }(maxMemifConns)
	maxMemifConns = memifConns.Load()
	before := Snapshot().Fallbacks[FallbackNoFastPath]
	ln := listen(t, ListenConfig{Link: LinkAuto, Stream: streamSmall})
	c, s := connPair(t, ln, &Dialer{Link: LinkAuto, Stream: streamSmall})
	defer c.Close()
	defer s.Close()
	var fe *FallbackError
	if transport(c) != "tcp" || transport(s) != "tcp" || !errors.As(c.(*Conn).FallbackError(), &fe) ||
		fe.Kind != FallbackNoFastPath || fe.Side != SideDialer || !strings.Contains(fe.Error(), "most memif connections") {
		t.Fatalf("transports %q, %q; dialer's reason %v", transport(c), transport(s), c.(*Conn).FallbackError())
	}
	// The listener saw a plain client: the dialer sent no preface.
	if s.(*Conn).FallbackError() != nil {
		t.Errorf("listener's reason %v, want none (a plain client)", s.(*Conn).FallbackError())
	}
	if got := Snapshot().Fallbacks[FallbackNoFastPath] - before; got != 1 {
		t.Errorf("%d fallbacks of kind %s counted, want 1", got, FallbackNoFastPath)
	}
	echoCheck(t, c, s, 4096)
}
