//go:build dpdk

package dpdk

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/internal/timerfd"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk/internal/rte"
	"github.com/rsock-go/rsock/verbs/softroce/link/internal/eventfd"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
	"golang.org/x/sys/unix"
)

// Stats counts what a link did.
type Stats struct {
	// Sent and Received count RoCEv2 frames.
	Sent, Received uint64
	// TxDropped counts packets dropped for a full tx queue or no mbufs;
	// Unresolved those whose next hop did not answer ARP or neighbour
	// solicitations (or is unreachable).
	TxDropped, Unresolved uint64
	// RxDropped counts received frames that were neither RoCEv2 to our
	// address nor ARP or neighbour discovery.
	RxDropped uint64
	// ARPIn and ARPOut count ARP frames received and sent.
	ARPIn, ARPOut uint64
	// NDIn and NDOut count neighbour solicitations and advertisements
	// received (for us) and sent.
	NDIn, NDOut uint64
	// Sleeps counts the receiver's sleeps (on the interrupt or timed).
	Sleeps uint64
}

// Link is a soft-RoCE link on a DPDK port. Its methods are safe for
// concurrent use.
type Link struct {
	cfg    Config
	port   uint16
	name   string // the port's device name
	driver string
	vdev   string // the vdev to remove on Close, or ""
	pool   *rte.Pool
	pair   *ringPair // shared with the other end of a ring pair, or nil
	st     station
	local  netip.AddrPort
	mtu    int
	intr   *eventfd.FD      // the rx interrupt, or nil
	nap    *timerfd.Sleeper // the receiver's sleeps without interrupts
	guard  *net.UDPConn     // keeps the kernel from answering 4791, or nil

	closed atomic.Bool
	done   chan struct{}
	life   sync.RWMutex // held for reading while the port is used to send; Close takes it

	txMu  sync.Mutex // the tx queue takes one sender at a time
	spare rte.Mbufs  // allocated mbufs for the next burst, under txMu

	neighMu   sync.Mutex
	neigh     *neighTable
	neighWake chan struct{} // closed and replaced when an entry is learnt

	rxMu    sync.Mutex // one receiver at a time; Close takes it
	rx      rte.Mbufs
	ctlOut  []ctlFrame    // ARP and neighbour discovery replies to send
	lastRx  time.Time     // when the receiver last got frames
	backoff time.Duration // its last sleep without interrupts

	sent, received, txDropped, unresolved, rxDropped, arpIn, arpOut, ndIn, ndOut, sleeps atomic.Uint64
}

var _ link.Link = (*Link)(nil)
var _ link.Looper = (*Link)(nil)
var _ link.DropCounter = (*Link)(nil)

// ringPair is what the two ends of a ring pair share: the rings and one
// mbuf pool (mbufs cross from one port to the other), freed by the
// second Close.
type ringPair struct {
	rp   *rte.RingPair
	pool *rte.Pool
	refs int
}

// Open opens a link on the port cfg names, initialising the process's
// DPDK environment on first use.
func Open(cfg Config) (*Link, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	env.Lock()
	defer env.Unlock()
	if err := acquireLocked(); err != nil {
		return nil, err
	}
	port, vdev, err := findPort(portDevargs(c.Port, c.MTU))
	if err != nil {
		releaseLocked()
		return nil, err
	}
	l, err := openPort(port, c, nil)
	if err != nil {
		if vdev != "" {
			rte.RemoveVdev(vdev)
		}
		releaseLocked()
		return nil, err
	}
	l.vdev = vdev
	return l, nil
}

// OpenRingPair opens two links joined back to back by a pair of rings in
// this process (net_ring): the software ceiling of a DPDK link, and a
// way to test without devices. Names must be unique in the process.
func OpenRingPair(nameA, nameB string, a, b Config) (*Link, *Link, error) {
	ca, err := a.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	cb, err := b.withDefaults()
	if err != nil {
		return nil, nil, err
	}
	env.Lock()
	defer env.Unlock()
	if err := acquireLocked(); err != nil {
		return nil, nil, err
	}
	acquireLocked()
	fail := func(err error) (*Link, *Link, error) {
		releaseLocked()
		releaseLocked()
		return nil, nil, err
	}
	rp, err := rte.NewRingPair(nameA, nameB, 2048)
	if err != nil {
		return fail(err)
	}
	env.pools++
	pool, err := rte.NewPool(fmt.Sprintf("rsock_pool%d", env.pools), ca.Mbufs+cb.Mbufs, MaxFrameLen)
	if err != nil {
		rte.Close(rp.A)
		rte.Close(rp.B)
		rp.FreeRings()
		return fail(err)
	}
	pair := &ringPair{rp: rp, pool: pool, refs: 2}
	la, err := openPort(rp.A, ca, pair)
	if err != nil {
		rte.Close(rp.B)
		rp.FreeRings()
		pool.Free()
		return fail(err)
	}
	lb, err := openPort(rp.B, cb, pair)
	if err != nil {
		env.Unlock()
		la.Close()
		env.Lock()
		rte.Close(rp.B)
		releaseLocked()
		return nil, nil, err
	}
	return la, lb, nil
}

// findPort returns the port spec names, hot-plugging it as a vdev if it
// is devargs or not a known port (vdev is then its name).
func findPort(spec string) (port uint16, vdev string, err error) {
	if spec == "" {
		for _, p := range rte.Ports() {
			if !portBusy(p) {
				return p, "", nil
			}
		}
		return 0, "", errors.New("dpdk: no free port (give a vdev in " + EnvArgs + " or " + EnvPort + ")")
	}
	if !strings.Contains(spec, ",") {
		if p, err := rte.PortByName(spec); err == nil {
			return p, "", nil
		}
	}
	name, err := rte.ProbeVdev(spec)
	if err != nil {
		return 0, "", err
	}
	p, err := rte.PortByName(name)
	if err != nil {
		rte.RemoveVdev(name)
		return 0, "", err
	}
	return p, name, nil
}

// busy marks the ports links are open on. The caller holds env.
var busy = map[uint16]bool{}

func portBusy(p uint16) bool { return busy[p] }

// openPort sets port up for a link. The caller holds env.
func openPort(port uint16, c Config, pair *ringPair) (*Link, error) {
	if busy[port] {
		return nil, fmt.Errorf("dpdk: port %d (%s) is in use", port, rte.PortName(port))
	}
	l := &Link{cfg: c, port: port, name: rte.PortName(port), pair: pair, done: make(chan struct{}),
		neigh: newNeighTable(), neighWake: make(chan struct{})}
	var err error
	if l.driver, err = rte.Driver(port); err != nil {
		return nil, err
	}
	if pair != nil {
		l.pool = pair.pool
	} else {
		env.pools++
		if l.pool, err = rte.NewPool(fmt.Sprintf("rsock_pool%d", env.pools), c.Mbufs, MaxFrameLen); err != nil {
			return nil, err
		}
	}
	fail := func(err error) (*Link, error) {
		if l.intr != nil {
			l.intr.Close()
		}
		if l.nap != nil {
			l.nap.Close()
		}
		rte.Stop(port)
		rte.Close(port)
		if pair == nil {
			l.pool.Free()
		}
		return nil, fmt.Errorf("dpdk: port %s: %w", l.name, err)
	}
	mtu := c.MTU
	if mtu == 0 {
		mtu = 1500
	}
	if bigFrames[l.driver] {
		mtu = min(mtu, 1500)
	}
	intr := !c.NoInterrupts && !noRxIntr[l.driver]
	if err = rte.Setup(port, intr, mtu, c.RxDesc, c.TxDesc, l.pool); err != nil && intr {
		intr = false
		rte.Stop(port)
		err = rte.Setup(port, false, mtu, c.RxDesc, c.TxDesc, l.pool)
	}
	if err != nil {
		return fail(err)
	}
	if intr {
		l.intr = rxInterrupt(port)
	}
	if l.nap, err = timerfd.New(); err != nil {
		return fail(err)
	}
	mac, err := rte.MAC(port)
	if err != nil {
		return fail(err)
	}
	if c.MAC != (wire.MAC{}) {
		mac = c.MAC
	} else if pair != nil {
		// Both ends of a ring pair have the same MAC, and net_ring cannot
		// change it (nor does it filter): a locally administered one from
		// the port id tells them apart.
		mac = [6]byte{0x02, 0x72, 0x73, 0x6b, byte(port >> 8), byte(port)}
	}
	if l.mtu, err = rte.MTU(port); err != nil {
		return fail(err)
	}
	if bigFrames[l.driver] && c.MTU > l.mtu {
		l.mtu = c.MTU
	}
	l.st = station{mac: wire.MAC(mac), ip: c.Local.Addr()}
	l.local = netip.AddrPortFrom(c.Local.Addr(), link.RoCEv2Port)
	for ip, mac := range c.Neighbours {
		l.neigh.setStatic(ip, mac)
	}
	if l.driver == "net_af_packet" || l.driver == "net_af_xdp" {
		l.guard = kernelGuard(l.local)
	}
	for deadline := time.Now().Add(c.LinkWait); ; {
		if up, _ := rte.LinkUp(port); up || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	busy[port] = true
	return l, nil
}

// bigFrames are the drivers that claim 1518-byte frames at most (DPDK
// 22.11 refuses a larger MTU) but carry longer ones: net_memif copies
// frames of any length (chained descriptors, merged into one mbuf on the
// receiving side), net_af_packet those that fit its ring frames (see
// portDevargs) and the interface's MTU, which the link leaves as it is.
// The link's own MTU is then the configured one.
var bigFrames = map[string]bool{"net_memif": true, "net_af_packet": true}

// noRxIntr are the drivers without rx interrupts in DPDK 22.11 (no
// rx_queue_intr_enable); asking them for one only logs an error.
var noRxIntr = map[string]bool{"net_memif": true, "net_ring": true, "net_af_packet": true, "net_af_xdp": true}

// rxInterrupt returns the rx queue's interrupt as an eventfd waited
// through the netpoller, or nil where the driver has none usable.
func rxInterrupt(port uint16) *eventfd.FD {
	fd, err := rte.RxIntrFD(port)
	if err != nil {
		return nil
	}
	if rte.RxIntrEnable(port) != nil {
		return nil
	}
	rte.RxIntrDisable(port)
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	e, err := eventfd.Open(dup)
	if err != nil {
		return nil
	}
	return e
}

// kernelGuard binds a UDP socket to addr where the kernel shares the
// interface (af_packet, af_xdp), so that it does not answer RoCEv2
// packets with ICMP port unreachable; the socket is never read and its
// small buffer drops what the kernel queues. nil if addr is not the
// kernel's (then it does not answer either) or the port is taken (by a
// socket that guards the same way).
func kernelGuard(addr netip.AddrPort) *net.UDPConn {
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil
	}
	c.SetReadBuffer(1)
	return c
}

// Name returns "dpdk".
func (l *Link) Name() string { return "dpdk" }

// LocalAddr returns the port's IP address and port 4791.
func (l *Link) LocalAddr() netip.AddrPort { return l.local }

// MTU returns the port's MTU (the largest IP packet).
func (l *Link) MTU() int { return l.mtu }

// Driver returns the port's driver, e.g. "net_memif".
func (l *Link) Driver() string { return l.driver }

// MAC returns the port's Ethernet address.
func (l *Link) MAC() wire.MAC { return l.st.mac }

// Interrupts reports whether the receiver sleeps on an rx interrupt
// (else it backs off in timed sleeps).
func (l *Link) Interrupts() bool { return l.intr != nil }

// Stats returns the link's counters.
func (l *Link) Stats() Stats {
	return Stats{Sent: l.sent.Load(), Received: l.received.Load(), TxDropped: l.txDropped.Load(),
		Unresolved: l.unresolved.Load(), RxDropped: l.rxDropped.Load(), ARPIn: l.arpIn.Load(), ARPOut: l.arpOut.Load(),
		NDIn: l.ndIn.Load(), NDOut: l.ndOut.Load(), Sleeps: l.sleeps.Load()}
}

// Dropped counts received frames dropped; see link.DropCounter.
func (l *Link) Dropped() uint64 { return l.rxDropped.Load() }

// Close stops the receiver, closes the port (and its vdev) and, with the
// last port of the process, cleans the DPDK environment up. It is
// idempotent.
func (l *Link) Close() error {
	if l.closed.Swap(true) {
		return nil
	}
	close(l.done)
	if l.intr != nil {
		l.intr.Signal()
	}
	l.nap.Wake()
	l.rxMu.Lock()
	defer l.rxMu.Unlock()
	l.life.Lock()
	defer l.life.Unlock()
	rte.ReleaseRx(&l.rx)
	l.txMu.Lock()
	rte.FreeTx(&l.spare, 0)
	l.txMu.Unlock()
	if l.intr != nil {
		l.intr.Close()
	}
	l.nap.Close()
	if l.guard != nil {
		l.guard.Close()
	}
	env.Lock()
	defer env.Unlock()
	var errs []error
	errs = append(errs, rte.Stop(l.port), rte.Close(l.port))
	if l.vdev != "" {
		errs = append(errs, rte.RemoveVdev(l.vdev))
	}
	delete(busy, l.port)
	if l.pair != nil {
		if l.pair.refs--; l.pair.refs == 0 {
			l.pair.rp.FreeRings()
			l.pair.pool.Free()
		}
	} else {
		l.pool.Free()
	}
	releaseLocked()
	return errors.Join(errs...)
}
