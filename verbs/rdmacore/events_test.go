//go:build rdmacore

package rdmacore

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

// TestAsyncActions checks the mapping from async event types to what
// they fail, and that every failure's cause wraps ECONNRESET (a CQ
// overrun's also verbs.ErrCQOverrun). It needs no device.
func TestAsyncActions(t *testing.T) {
	for _, c := range []struct {
		kind int
		want asyncAction
		name string // part of libibverbs' name of the event
	}{
		{evCQErr, actFailCQ, "CQ"},
		{evQPFatal, actFailQP, "work queue catastrophic"},
		{evQPReqErr, actFailQP, "request"},
		{evQPAccessErr, actFailQP, "access"},
		{evPortErr, actFailPort, "port"},
		{evDeviceFatal, actFailDevice, "local catastrophic"},
		{evCommEst, actNote, "communication"},
		{evPortActive, actNote, "port"},
		{evLastWQE, actNote, "WQE"},
		{evGIDChange, actNote, "GID"},
	} {
		got := asyncActionOf(c.kind)
		name := eventName(c.kind)
		if got != c.want || !strings.Contains(strings.ToLower(name), strings.ToLower(c.name)) {
			t.Errorf("event %d (%q): action %d, want %d; name should contain %q", c.kind, name, got, c.want, c.name)
		}
		if got == actNote {
			continue
		}
		err := asyncCause("rxe0", name, asyncEvent{kind: c.kind, qpn: 17, port: 1}, got)
		if !errors.Is(err, syscall.ECONNRESET) || !strings.Contains(err.Error(), name) {
			t.Errorf("event %q: cause %v does not wrap ECONNRESET or name the event", name, err)
		}
		if overrun := errors.Is(err, verbs.ErrCQOverrun); overrun != (got == actFailCQ) {
			t.Errorf("event %q: cause %v: wraps ErrCQOverrun %v", name, err, overrun)
		}
	}
}

// EnvPortDownLink names the netdev of the test device that
// TestPortDownFailsQP may take down and up again (test/rxe/rdmacore.sh
// sets it in the guest: eth0). Unset, the test skips.
const EnvPortDownLink = "RSOCK_RDMACORE_PORTDOWN"

// TestPortDownFailsQP takes the device's link down: rxe reports a port
// error, and the QPs fail, their posted receives completing flushed, with
// the event as the QP's Cause, wrapping ECONNRESET.
func TestPortDownFailsQP(t *testing.T) {
	link := os.Getenv(EnvPortDownLink)
	if link == "" {
		t.Skipf("%s is not set: the test takes a network link down, so it runs only where told to (test/rxe/rdmacore.sh)", EnvPortDownLink)
	}
	d := openTestDevice(t)
	a, b := newNode(t, d, 4096, allAccess), newNode(t, d, 4096, allAccess)
	connect(t, a, b, verbs.MTU1024, allAccess)
	a.postRecv(1, 0, 64)
	ip := func(args ...string) {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	ip("link", "set", link, "down")
	defer ip("link", "set", link, "up")
	wc := waitWC(t, a.rcq)
	if wc.WRID != 1 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("after port down: completion %+v, want wr 1 flushed", wc)
	}
	cause := a.qp.(verbs.Causer).Cause()
	if !errors.Is(cause, syscall.ECONNRESET) || !strings.Contains(cause.Error(), "port") {
		t.Fatalf("QP cause %v, want the port error wrapping ECONNRESET", cause)
	}
	if b.qp.(verbs.Causer).Cause() == nil {
		t.Error("the other QP on the port has no cause")
	}
	t.Logf("QP %d failed: %v", a.qp.QPN(), cause)
}
