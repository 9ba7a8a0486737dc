package netconn

import (
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// Devices are shared by the connections of the process that use the same
// provider, link and local IP, the way the queues of a NIC are: a
// soft-RoCE device is one UDP socket on that IP (port 4791 if it is free,
// else an ephemeral port) and one goroutine that receives for all its
// queue pairs. A busy device
// is bound by that goroutine's processor, so up to maxDevices() devices
// serve one IP: a new connection goes to the device with the fewest
// connections, and a further device is opened while each one has some. A
// device is closed when no connection has used it for deviceLinger.
var deviceLinger = 5 * time.Second

// maxDevices bounds the devices of one provider, link and IP: one per
// processor, at most 4 (each holds about 5 MiB of packet buffers).
var maxDevices = func() int { return min(runtime.GOMAXPROCS(0), 4) }

type deviceKey struct {
	provider, link string
	ip             netip.Addr
}

type sharedDevice struct {
	key   deviceKey
	dev   verbs.Device
	refs  int
	timer *time.Timer
	// private: the device of one connection (a memif link), not in the
	// registry, closed with its connection.
	private bool
	// release, when set, is what releaseDevice does instead: the
	// connection's share of a device kept elsewhere (an shm channel).
	release func()
}

var registry = struct {
	sync.Mutex
	devs    map[deviceKey][]*sharedDevice
	opening map[deviceKey]chan struct{} // closed when the device being opened is in devs, or failed
}{devs: make(map[deviceKey][]*sharedDevice), opening: make(map[deviceKey]chan struct{})}

// devicesOpened counts the devices opened so far, to name them.
var devicesOpened atomic.Int64

// acquireDevice returns a device for a provider choice and local IP: the
// one with the fewest connections, or a new one (see maxDevices). Release
// it with releaseDevice. The registry is not locked while a device opens
// (a socket, a memif handshake): only other dialers of the same key wait
// for an opening, and only when there is no device to share.
func acquireDevice(provider, link string, ip netip.Addr) (*sharedDevice, error) {
	switch provider {
	case ProviderAuto:
		provider = ProviderSoftRoCE
	case ProviderRDMACore:
		if !rdmacoreBuiltIn() {
			return nil, errNoRDMACore
		}
	}
	ops := opsFor(provider, link)
	if _, ok := ops.(deviceOpener); !ok {
		return nil, fmt.Errorf("netconn: no shared device for provider %s on link %q", provider, link)
	}
	key := deviceKey{provider, link, deviceIP(ops, ip)}
	limit := maxDevices()
	if l, ok := ops.(deviceLimiter); ok {
		limit = l.deviceLimit()
	}
	for {
		registry.Lock()
		devs := registry.devs[key]
		least := leastUsed(devs)
		if least != nil && (least.refs == 0 || len(devs) >= limit) {
			d := least.ref()
			registry.Unlock()
			return d, nil
		}
		if opening, busy := registry.opening[key]; busy {
			if least != nil {
				d := least.ref() // share rather than wait
				registry.Unlock()
				return d, nil
			}
			registry.Unlock()
			<-opening
			continue
		}
		opening := make(chan struct{})
		registry.opening[key] = opening
		registry.Unlock()

		d, err := openDevice(key)

		registry.Lock()
		delete(registry.opening, key)
		close(opening)
		if err != nil {
			least := leastUsed(registry.devs[key])
			if least != nil {
				least.ref() // a busier device beats no device
			}
			registry.Unlock()
			if least != nil {
				return least, nil
			}
			return nil, err
		}
		registry.devs[key] = append(registry.devs[key], d)
		registry.Unlock()
		return d, nil
	}
}

// leastUsed returns the device of devs with the fewest connections, or
// nil. The caller holds registry.
func leastUsed(devs []*sharedDevice) *sharedDevice {
	var least *sharedDevice
	for _, d := range devs {
		if least == nil || d.refs < least.refs {
			least = d
		}
	}
	return least
}

// ref counts a new connection on d. The caller holds registry.
func (d *sharedDevice) ref() *sharedDevice {
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	d.refs++
	return d
}

// openDevice opens a device for key, with one reference, through its
// link's ops. The caller does not hold registry.
func openDevice(key deviceKey) (*sharedDevice, error) {
	return opsFor(key.provider, key.link).(deviceOpener).openDevice(key)
}

// deviceIP is the IP a device of a link is keyed by: none for a link with
// its own address (a registered link: one port per process).
func deviceIP(ops any, ip netip.Addr) netip.Addr {
	if _, ok := ops.(registeredOps); ok {
		return netip.Addr{}
	}
	return ip.Unmap()
}

// CloseIdleDevices closes at once the devices that no connection uses
// (instead of after their linger time), so that a program about to exit
// releases them: a DPDK port cleans its environment up only when it
// closes.
func CloseIdleDevices() {
	registry.Lock()
	var idle []*sharedDevice
	for _, devs := range registry.devs {
		for _, d := range devs {
			if d.refs == 0 {
				idle = append(idle, d)
			}
		}
	}
	for _, d := range idle {
		if d.timer != nil {
			d.timer.Stop()
			d.timer = nil
		}
		removeLocked(d)
	}
	registry.Unlock()
	for _, d := range idle {
		d.dev.Close()
	}
	closeIdleShmChannels()
}

// newDevice opens a soft-RoCE device for streams over l, with one
// reference; l is closed with it, or on failure.
func newDevice(key deviceKey, name string, l link.Link, mtu verbs.MTU) (*sharedDevice, error) {
	dev, err := softroce.Open(softroce.Config{Name: name, Link: l, MaxMTU: mtu, AckDelay: streamAckDelay, Capture: deviceCapture()})
	if err != nil {
		l.Close()
		return nil, err
	}
	return shareDevice(key, dev), nil
}

// shareDevice makes a shared device of dev, with one reference. Each
// connection's endpoint has a protection domain of its own (see
// rsock.NewEndpoint), so that one connection's peer cannot reach another
// connection's rings.
func shareDevice(key deviceKey, dev verbs.Device) *sharedDevice {
	return &sharedDevice{key: key, dev: dev, refs: 1}
}

// releaseDevice drops a reference; the last one closes the device after
// deviceLinger. A device is taken out of the registry under its lock and
// closed outside it.
func releaseDevice(d *sharedDevice) {
	if d.release != nil {
		d.release()
		return
	}
	if d.private {
		d.dev.Close()
		memifConns.Add(-1)
		return
	}
	registry.Lock()
	d.refs--
	if d.refs > 0 {
		registry.Unlock()
		return
	}
	if deviceLinger <= 0 {
		removeLocked(d)
		registry.Unlock()
		d.dev.Close()
		return
	}
	d.timer = time.AfterFunc(deviceLinger, func() {
		registry.Lock()
		idle := d.refs == 0 && slices.Contains(registry.devs[d.key], d)
		if idle {
			removeLocked(d)
		}
		registry.Unlock()
		if idle {
			d.dev.Close()
		}
	})
	registry.Unlock()
}

// removeLocked takes d out of the registry. The caller holds registry.
func removeLocked(d *sharedDevice) {
	devs := slices.DeleteFunc(registry.devs[d.key], func(e *sharedDevice) bool { return e == d })
	if len(devs) == 0 {
		delete(registry.devs, d.key)
	} else {
		registry.devs[d.key] = devs
	}
}

// transport names the path of a device, e.g. "rdma/softroce/udp", or
// "rdma/rdmacore/<device>" for an rdma-core device.
func (d *sharedDevice) transport() string {
	if d.dev.Provider() == ProviderShm {
		return "rdma/" + ProviderShm
	}
	if d.dev.Provider() == ProviderRDMACore {
		return "rdma/" + ProviderRDMACore + "/" + d.dev.Name()
	}
	return "rdma/" + d.dev.Provider() + "/" + d.dev.Link()
}

// streamAckDelay lets the devices of rsock streams hold an ACK briefly:
// a stream's writer never waits on the completion of one small WRITE (its
// send ring has room for many), so request/response traffic saves an ACK
// packet and a wake-up of the peer per message. It is well below any ACK
// timeout, and Close sends an ACK still held.
const streamAckDelay = 200 * time.Microsecond

// Counters returns the sum of the statistics of every RDMA device the
// process has open now (devices closed after their last connection are
// not counted).
func Counters() verbs.Counters {
	registry.Lock()
	defer registry.Unlock()
	var c verbs.Counters
	for _, devs := range registry.devs {
		for _, d := range devs {
			c.Add(d.dev.Counters())
		}
	}
	return c
}

// pathRingSize is the stream ring size of a soft-RoCE connection over a
// network link (udp, dpdk) when none is configured, eight times rsock's
// default. The receiver's ring bounds what a connection has in flight,
// as TCP's receive window does, and TCP's grows with the path (Linux's
// tcp_rmem reaches 6 MiB): at a 1 Gbit/s bottleneck beside a CUBIC flow
// whose window had grown to 1,455 segments, rsock's stopped at its 512
// KiB ring and took 0.26-0.33 of the link at a 20 ms queue; with 4 MiB,
// which also holds the 2048-packet window of wide SACK, 0.31-0.50
// (README, "Congestion control"). A larger window let a loss storm at a
// 100 Mbit/s link's start resend tens of thousands of packets until the
// controller halved its window within a round that resends a whole
// window (softroce's lossBurst). The ring is address space, backed
// only where data has passed: an idle connection costs none of it. A
// network path with no rsock peer never gets here, and rdma-core's
// registered memory is pinned, so its default stays rsock's.
const pathRingSize = 4 << 20

// defaultRingSize is the stream ring size of a connection on plan p when
// none is configured: pathRingSize on soft-RoCE's network links, 0 (the
// link's own default: shm and memif set theirs, rsock's otherwise)
// elsewhere.
func defaultRingSize(p Plan) int {
	if p.Provider == ProviderSoftRoCE && p.Wire == "" && (p.Link == LinkUDP || p.Link == LinkDPDK) {
		return pathRingSize
	}
	return 0
}

// streamConfig returns the stream configuration of a connection on plan
// p between the IPs of c: the ring size of its link when none is
// configured (defaultRingSize), and for a link whose device MTU is its
// interface's (udp), the path MTU capped to the route's, the route's IP
// MTU less RoCEv2's headers. It fails when the route cannot carry
// RoCEv2.
func streamConfig(base rsock.Config, p Plan, c net.Conn) (rsock.Config, error) {
	if base.RingSize == 0 {
		base.RingSize = defaultRingSize(p)
	}
	e, _ := lookupLink(p.Link)
	pm, ok := e.ops.(pathMTUer)
	if !ok || p.Wire != "" || p.Provider != e.provider {
		return base, nil
	}
	local := c.LocalAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	remote := c.RemoteAddr().(*net.TCPAddr).AddrPort().Addr().Unmap()
	ipMTU, err := pm.pathMTU(local, remote)
	if err != nil {
		return base, nil // the device's (interface) MTU applies
	}
	m, err := softroce.MTUForIP(ipMTU, !remote.Is4())
	if err != nil {
		return base, fmt.Errorf("netconn: the route to %v: %w", remote, err)
	}
	user := base.MaxMTU
	if base.MaxMTU == 0 || m.Bytes() < base.MaxMTU {
		base.MaxMTU = m.Bytes()
	}
	// Packets may carry more than the path MTU names, up to what the
	// route and the caller's MaxMTU allow.
	packet, err := softroce.PacketMTUForIP(ipMTU, !remote.Is4())
	if user != 0 {
		packet = min(packet, user/64*64)
	}
	if err == nil && packet >= 256 && (base.MaxPacketMTU == 0 || packet < base.MaxPacketMTU) {
		base.MaxPacketMTU = packet
	}
	return base, nil
}
