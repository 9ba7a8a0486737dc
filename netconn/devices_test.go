package netconn

import (
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// TestDevicePlacement checks how connections are spread over the devices
// of one IP: a new device while every device has connections and fewer
// than maxDevices exist, else the device with the fewest connections.
func TestDevicePlacement(t *testing.T) {
	defer func(f func() int) { maxDevices = f }(maxDevices)
	maxDevices = func() int { return 2 }
	ip := netip.MustParseAddr("127.0.0.1")
	acquire := func() *sharedDevice {
		t.Helper()
		d, err := acquireDevice(ProviderSoftRoCE, "udp", ip)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	count := func() int {
		registry.Lock()
		defer registry.Unlock()
		return len(registry.devs[deviceKey{ProviderSoftRoCE, "udp", ip}])
	}

	a := acquire()
	b := acquire()
	if a == b {
		t.Fatal("second connection shares the first one's device while a second device is allowed")
	}
	type porter interface{ LocalAddr() netip.AddrPort }
	if pa, pb := a.dev.(porter).LocalAddr(), b.dev.(porter).LocalAddr(); pa == pb {
		t.Fatalf("both devices on %v", pa)
	}
	if a.transport() != "rdma/softroce/udp" || b.transport() != a.transport() {
		t.Fatalf("transports %q, %q", a.transport(), b.transport())
	}
	c := acquire() // the limit is reached: the least used, a
	if c != a || a.refs != 2 || b.refs != 1 {
		t.Fatalf("third connection: got device with %d refs, a %d b %d", c.refs, a.refs, b.refs)
	}
	d := acquire() // a has 2, b has 1
	if d != b {
		t.Fatal("fourth connection not on the less used device")
	}
	if n := count(); n != 2 {
		t.Fatalf("%d devices, want 2", n)
	}
	for _, x := range []*sharedDevice{a, b, c, d} {
		releaseDevice(x) // deviceLinger is 0 in tests: the last release closes
	}
	if n := count(); n != 0 {
		t.Fatalf("%d devices left after every release", n)
	}

	maxDevices = func() int { return 1 }
	e, f := acquire(), acquire()
	if e != f {
		t.Fatal("two devices opened with maxDevices 1")
	}
	releaseDevice(e)
	releaseDevice(f)
}

// TestDeviceOpenFails: when a further device cannot be opened, a new
// connection shares an existing one; with none, the error is returned
// (and the connection falls back to TCP).
func TestDeviceOpenFails(t *testing.T) {
	defer func(f func() int) { maxDevices = f }(maxDevices)
	defer func(f func(udp.Config) (link.Link, error)) { listenLink = f }(listenLink)
	maxDevices = func() int { return 4 }
	ip := netip.MustParseAddr("127.0.0.1")
	a, err := acquireDevice(ProviderSoftRoCE, "udp", ip)
	if err != nil {
		t.Fatal(err)
	}
	defer releaseDevice(a)
	errNoLink := errors.New("no link for you")
	listenLink = func(udp.Config) (link.Link, error) { return nil, errNoLink }
	b, err := acquireDevice(ProviderSoftRoCE, "udp", ip)
	if err != nil || b != a || a.refs != 2 {
		t.Fatalf("with the first device open: %v, same device %v, refs %d", err, b == a, a.refs)
	}
	releaseDevice(b)
	other := netip.MustParseAddr("127.0.0.2")
	if d, err := acquireDevice(ProviderSoftRoCE, "udp", other); !errors.Is(err, errNoLink) {
		if d != nil {
			releaseDevice(d)
		}
		t.Fatalf("no device and none can be opened: %v", err)
	}
}

// TestDeviceOpenDoesNotBlockRegistry: while one device is opening (here
// held open by the test), devices of other addresses are acquired and
// released, and Counters answers: the registry is not locked across the
// open.
func TestDeviceOpenDoesNotBlockRegistry(t *testing.T) {
	defer func(f func(udp.Config) (link.Link, error)) { listenLink = f }(listenLink)
	slow := netip.MustParseAddr("127.0.0.2")
	entered, release := make(chan struct{}), make(chan struct{})
	listenLink = func(cfg udp.Config) (link.Link, error) {
		if cfg.Addr.Addr() == slow {
			close(entered)
			<-release
		}
		return udp.Listen(cfg)
	}
	slowDone := make(chan error, 1)
	go func() {
		d, err := acquireDevice(ProviderSoftRoCE, "udp", slow)
		if err == nil {
			releaseDevice(d)
		}
		slowDone <- err
	}()
	<-entered
	fast := make(chan error, 1)
	go func() {
		d, err := acquireDevice(ProviderSoftRoCE, "udp", netip.MustParseAddr("127.0.0.1"))
		if err == nil {
			Counters()
			releaseDevice(d)
		}
		fast <- err
	}()
	select {
	case err := <-fast:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		close(release)
		t.Fatal("acquiring a device waited for another address's device to open")
	}
	close(release)
	if err := <-slowDone; err != nil {
		t.Fatal(err)
	}
}

// TestConcurrentAcquire: many connections acquiring at once share a
// bounded number of devices.
func TestConcurrentAcquire(t *testing.T) {
	defer func(f func() int) { maxDevices = f }(maxDevices)
	maxDevices = func() int { return 2 }
	ip := netip.MustParseAddr("127.0.0.1")
	var wg sync.WaitGroup
	devs := make([]*sharedDevice, 32)
	for i := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := acquireDevice(ProviderSoftRoCE, "udp", ip)
			if err != nil {
				t.Error(err)
				return
			}
			devs[i] = d
		}()
	}
	wg.Wait()
	distinct := map[*sharedDevice]bool{}
	for _, d := range devs {
		if d != nil {
			distinct[d] = true
			releaseDevice(d)
		}
	}
	if len(distinct) > 2 {
		t.Fatalf("%d devices for one address with maxDevices 2", len(distinct))
	}
}

// TestCompatibleLinks: a link reaches itself, and udp and dpdk (both
// RoCEv2 in IP/UDP) reach each other; memif reaches only memif.
func TestCompatibleLinks(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want bool
	}{
		{LinkUDP, LinkUDP, true},
		{LinkDPDK, LinkDPDK, true},
		{LinkMemif, LinkMemif, true},
		{LinkUDP, LinkDPDK, true},
		{LinkDPDK, LinkUDP, true},
		{LinkMemif, LinkUDP, false},
		{LinkDPDK, LinkMemif, false},
		{"pipe", LinkUDP, false},
	} {
		if got := linksInteroperate(c.a, c.b); got != c.want {
			t.Errorf("linksInteroperate(%q, %q) = %v, want %v", c.a, c.b, got, c.want)
		}
	}
}

// TestDefaultRingSize: soft-RoCE's network links get pathRingSize when
// no ring size is configured; memif (also over an external wire), shm and
// rdma-core keep their own defaults (0 here).
func TestDefaultRingSize(t *testing.T) {
	for _, tc := range []struct {
		plan Plan
		want int
	}{
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, pathRingSize},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkDPDK}, pathRingSize},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Offer: true, SameHost: true}, 0},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Wire: "/run/memif.sock"}, 0},
		{Plan{Provider: ProviderShm, Link: LinkShm, Offer: true, SameHost: true}, 0},
		{Plan{Provider: ProviderRDMACore, Link: rdmacoreLink}, 0},
	} {
		if got := defaultRingSize(tc.plan); got != tc.want {
			t.Errorf("defaultRingSize(%+v) = %d, want %d", tc.plan, got, tc.want)
		}
	}
}
