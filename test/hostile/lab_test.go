//go:build linux

package hostile

import (
	"errors"
	"flag"
	"net"
	"net/netip"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/internal/netns"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// netconn (TestSlowloris) keeps an idle soft-RoCE device open for a few
// seconds after its last connection, for the next one; its receive loop,
// fine clock and linger timer are not leaks.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
		// An shm channel outlives its last connection for a few seconds,
		// for the next one between the same two processes.
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/shm.(*Device).watch"),
	)
}

var loopback = flag.Bool("hostile.loopback", false, "run on loopback even where network namespaces can be made")

// side is one end of the stream under attack: its device, endpoint and a
// canary buffer, and the raw socket in its namespace that forges packets
// toward the other side.
type side struct {
	name string
	ns   string // its network namespace; empty on loopback
	dev  *softroce.Device
	link netip.AddrPort // the device's UDP address
	// stranger is an address on the same network that no device has.
	stranger netip.Addr
	params   rsock.Params
	ep       *rsock.Endpoint
	raw      *rawSender
	// canary is registered for remote access under a key nobody is told,
	// in a protection domain of its own, as another connection's ring on
	// the same device is; forged WRITEs aim at it, and it must never
	// change.
	canary   []byte
	canaryMR verbs.MR
}

// canaryByte is the canary's content at offset i.
func canaryByte(i int) byte { return byte(i*31 + 7) }

// newSides makes the two ends in two namespaces joined by a veth, or on
// loopback when no namespace can be made; it skips without root. Their udp
// links report ICRCs that only an unknown IPv4 ID explains as bad with
// strictICRC, as unverified without it (as netconn opens them).
func newSides(t *testing.T, cfg rsock.Config, strictICRC bool) (a, b *side) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot open raw sockets or create network namespaces")
	}
	nsA, nsB := "", ""
	addrA, addrB := netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")
	if err := netlab.Check(); err != nil || *loopback {
		if err == nil {
			err = errors.New("-hostile.loopback")
		}
		t.Logf("on loopback: no network namespaces (%v)", err)
	} else {
		lab, err := netlab.New(netlab.Config{Prefix: "hostile"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := lab.Close(); err != nil {
				t.Error(err)
			}
		})
		nsA, nsB = lab.A.Name, lab.B.Name
		addrA, addrB = lab.A.IPv4, lab.B.IPv4
	}
	a = newSide(t, "a", nsA, addrA, cfg, strictICRC)
	b = newSide(t, "b", nsB, addrB, cfg, strictICRC)
	a.stranger, b.stranger = addrB.Next(), addrB.Next()
	return a, b
}

func newSide(t *testing.T, name, ns string, addr netip.Addr, cfg rsock.Config, strictICRC bool) *side {
	t.Helper()
	s := &side{name: name, ns: ns}
	var l *udp.Link
	inNetns(t, ns, func() {
		var err error
		if l, err = udp.Listen(udp.Config{Addr: netip.AddrPortFrom(addr, 0), StrictICRC: strictICRC}); err != nil {
			t.Fatal(err)
		}
		if s.raw, err = newRawSender(); err != nil {
			l.Close()
			t.Fatal(err)
		}
	})
	t.Cleanup(func() { s.raw.Close() })
	// Packets of a 1024-byte MTU fit the veth's 1500 bytes.
	dev, err := softroce.Open(softroce.Config{Link: l, MaxMTU: verbs.MTU1024})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s.dev, s.link = dev, l.LocalAddr()
	pd, err := dev.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	if s.canary, err = verbs.AllocBuffer(64 << 10); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { verbs.FreeBuffer(s.canary) })
	for i := range s.canary {
		s.canary[i] = canaryByte(i)
	}
	if s.canaryMR, err = pd.RegMR(s.canary, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead|verbs.AccessRemoteAtomic); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.canaryMR.Close() })
	if s.ep, err = rsock.NewEndpoint(dev, cfg); err != nil {
		t.Fatal(err)
	}
	s.params = s.ep.Params()
	return s
}

// connect starts the stream between a and b.
func connect(t *testing.T, a, b *side) (sa, sb *rsock.Stream) {
	t.Helper()
	ta := &net.TCPAddr{IP: a.link.Addr().AsSlice(), Port: int(a.link.Port())}
	tb := &net.TCPAddr{IP: b.link.Addr().AsSlice(), Port: int(b.link.Port())}
	sa, err := a.ep.Connect(b.params, rsock.ConnectOptions{Net: "tcp", LocalAddr: ta, RemoteAddr: tb})
	if err != nil {
		t.Fatal(err)
	}
	sb, err = b.ep.Connect(a.params, rsock.ConnectOptions{Net: "tcp", LocalAddr: tb, RemoteAddr: ta})
	if err != nil {
		sa.Close()
		t.Fatal(err)
	}
	return sa, sb
}

// checkCanary fails if any byte of s's canary changed.
func (s *side) checkCanary(t *testing.T) {
	t.Helper()
	for i, c := range s.canary {
		if c != canaryByte(i) {
			t.Errorf("%s: canary byte %d changed to %#x", s.name, i, c)
			return
		}
	}
}

// inNetns runs fn on a thread switched into network namespace ns (the
// current one if ns is empty). Sockets fn creates stay in ns.
func inNetns(t *testing.T, ns string, fn func()) {
	t.Helper()
	if ns == "" {
		fn()
		return
	}
	if err := netns.Do(ns, fn); err != nil {
		t.Error(err)
	}
}
