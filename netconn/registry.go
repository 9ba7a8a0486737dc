package netconn

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// The registry of links: every way a connection can run, one entry each,
// in the order the plan prefers them. An entry is data (what the plan
// needs to choose it); what a link needs at run time sits behind small
// optional interfaces that its ops implement:
//
//	deviceOpener  opens a device that the connections of one IP share (udp, dpdk, rdma-core)
//	pathMTUer     caps a connection's path MTU to its route's (udp: the kernel's route)
//	offerer       sets a connection's link up through an offer in the Hello (shm, memif)
//
// A same-host provider joins with one entry at the top of linkTable, as
// shm does, and the ops (an offerer) that set it up.

// linkScope says where a link reaches.
type linkScope uint8

const (
	// scopeNetwork: peers over an IP network (and on this host).
	scopeNetwork linkScope = iota
	// scopeHost: only processes of this host (and network namespace).
	scopeHost
)

// linkEntry is one link of the registry.
type linkEntry struct {
	// name is the link's name: RSOCK_LINK's value, Hello.Link and the last
	// part of Transport ("roce" for rdma-core: the device's own port).
	name string
	// provider runs the link: shm, softroce or rdmacore.
	provider string
	scope    linkScope
	// roce: RoCEv2 in IP/UDP to port 4791, reaching every other roce link
	// (soft-RoCE's udp and dpdk links, RNICs, rxe).
	roce bool
	// fast: faster than TCP on its path. Provider and link auto choose
	// only fast links.
	fast bool
	// byName: used only when RSOCK_LINK names it (dpdk: its port is
	// configured by its own knobs).
	byName bool
	// offerCap is the Hello capability that offers a scopeHost link.
	offerCap uint32
	// ops implements what the link needs (see the interfaces below).
	ops any
}

// linkTable lists the built-in links, most preferred first.
var linkTable = []linkEntry{
	{name: LinkShm, provider: ProviderShm, scope: scopeHost, fast: true, offerCap: fallback.CapShm, ops: shmOps{}},
	{name: LinkMemif, provider: ProviderSoftRoCE, scope: scopeHost, fast: true, offerCap: fallback.CapMemif, ops: memifOps{}},
	{name: rdmacoreLink, provider: ProviderRDMACore, scope: scopeNetwork, roce: true, fast: true, ops: rdmacoreOps{}},
	{name: LinkDPDK, provider: ProviderSoftRoCE, scope: scopeNetwork, roce: true, fast: true, byName: true, ops: registeredOps{}},
	{name: LinkUDP, provider: ProviderSoftRoCE, scope: scopeNetwork, roce: true, ops: udpOps{}},
}

// deviceOpener opens a device for key (a provider, link and local IP)
// with one reference; the connections of key share it.
type deviceOpener interface {
	openDevice(key deviceKey) (*sharedDevice, error)
}

// deviceLimiter bounds the devices of one key (default maxDevices()).
type deviceLimiter interface {
	deviceLimit() int
}

// pathMTUer returns the largest IP packet the route from local to remote
// carries, for a link whose device MTU is its interface's.
type pathMTUer interface {
	pathMTU(local, remote netip.Addr) (int, error)
}

// offerer sets up a scopeHost link for a connection: the dialer offers it
// in its Hello (offer), the listener connects to the offer and makes its
// endpoint (connect), and the dialer takes the link the listener
// connected (pendingOffer.accept). A memif connection has its own device;
// shm connections share their processes' channel.
type offerer interface {
	// validOffer reports whether h carries a well-formed offer of the
	// link: names the plan accepts, before anything is connected.
	validOffer(h *fallback.Hello) bool
	// available reports why the link cannot be set up now, or nil.
	available() error
	// offer makes the dialer's offer and puts it into h; only the
	// process at the other end of tcp may take it.
	offer(tcp net.Conn, h *fallback.Hello, local netip.Addr, deadline time.Time) (pendingOffer, error)
	// connect connects the listener to the dialer's offer in h, checking
	// that the offer belongs to the process at the other end of tcp.
	connect(tcp net.Conn, h *fallback.Hello, local netip.Addr, deadline time.Time, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error)
}

// replyBinder is an offerer whose listener puts more into its Accept
// once it connected: shm binds a reused channel to the connection.
type replyBinder interface {
	bindReply(tcp net.Conn, offer, reply *fallback.Hello, dev *sharedDevice) error
}

// pendingOffer is the dialer's side of an offer.
type pendingOffer interface {
	// accept takes the link the listener connected and makes an endpoint
	// on a device over it.
	// reply is the listener's Accept.
	accept(reply *fallback.Hello, deadline time.Time, local netip.Addr, stream rsock.Config) (*sharedDevice, *rsock.Endpoint, error)
	// close withdraws the offer.
	close()
}

// lookupLink returns the registry's entry for a link name and provider:
// a built-in link, or a registered one (link.Register) that is not.
func lookupLink(name string) (linkEntry, bool) {
	for _, e := range linkTable {
		if e.name == name {
			return e, true
		}
	}
	if _, ok := link.Lookup(name); ok {
		// A registered link carries RoCEv2 on a port of its own, as dpdk.
		return linkEntry{name: name, provider: ProviderSoftRoCE, scope: scopeNetwork, roce: true, byName: true, ops: registeredOps{}}, true
	}
	return linkEntry{}, false
}

// entries returns the table, with the entry of a registered link that
// the settings name appended.
func entries(named string) []linkEntry {
	if slices.ContainsFunc(linkTable, func(e linkEntry) bool { return e.name == named }) {
		return linkTable
	}
	if e, ok := lookupLink(named); ok {
		return append(slices.Clip(linkTable), e)
	}
	return linkTable
}

// linksInteroperate reports whether a device on link a reaches a peer on
// link b: the same link, or two RoCEv2 links.
func linksInteroperate(a, b string) bool {
	if a == b {
		return true
	}
	ea, oka := lookupLink(a)
	eb, okb := lookupLink(b)
	return oka && okb && ea.roce && eb.roce
}

// Link names other than the built-in ones.

// LinkDPDK uses a DPDK port (soft-RoCE over DPDK), in binaries built
// with -tags dpdk that import verbs/softroce/link/dpdk. A link that a
// build tag compiles in registers itself by name with link.Register;
// netconn never imports it. RSOCK_LINK (or the Link field) may name such
// a link when the binary has it: the process then opens one device on
// it, which all its RDMA connections share, and which is configured by
// the link's own knobs (RSOCK_DPDK_*), not by the connection's IP.
const LinkDPDK = "dpdk"

// rdmacoreLink is what rdma-core devices report as their link
// (verbs/rdmacore.LinkName): RoCEv2 on the device's own port, the same
// wire as soft-RoCE's udp link.
const rdmacoreLink = "roce"

// checkLink accepts a link setting: auto, a built-in link, or a
// registered one.
func checkLink(name string) error {
	if name == LinkAuto {
		return nil
	}
	if e, ok := lookupLink(name); ok && (e.provider == ProviderSoftRoCE || e.provider == ProviderShm) {
		if _, reg := e.ops.(registeredOps); !reg {
			return nil
		}
		if _, ok := link.Lookup(name); ok {
			return nil
		}
	}
	if name == LinkDPDK {
		return errors.New("netconn: the dpdk link is not in this binary: build it with -tags dpdk and import github.com/rsock-go/rsock/verbs/softroce/link/dpdk")
	}
	return fmt.Errorf("netconn: unknown link %q (want auto, shm, memif, udp or a registered link)", name)
}

// registered reports whether name is a registered link rather than a
// built-in one.
func registered(name string) bool {
	e, ok := lookupLink(name)
	if !ok {
		return false
	}
	_, reg := e.ops.(registeredOps)
	_, there := link.Lookup(name)
	return reg && there
}

// udpOps: soft-RoCE over a kernel UDP socket on the local IP, port 4791
// if it is free, else an ephemeral one.
type udpOps struct{}

func (udpOps) openDevice(key deviceKey) (*sharedDevice, error) {
	l, err := listenLink(udp.Config{Addr: netip.AddrPortFrom(key.ip, 0)})
	if err != nil {
		return nil, fmt.Errorf("netconn: soft-RoCE link on %v: %w", key.ip, err)
	}
	name := fmt.Sprintf("softroce%d-%v", devicesOpened.Add(1)-1, key.ip)
	// As rxe does, the device's MTU is its interface's (the link has no
	// netdev of its own); each connection may lower it to its route's.
	mtu := verbs.MTU4096
	if ifMTU, err := udp.InterfaceMTU(key.ip); err == nil {
		if m, err := softroce.MTUForIP(ifMTU, !key.ip.Is4()); err == nil {
			mtu = m
		}
	}
	return newDevice(key, name, l, mtu)
}

func (udpOps) pathMTU(local, remote netip.Addr) (int, error) { return udp.RouteMTU(local, remote) }

// listenLink opens a udp device's link; tests replace it to make it fail.
var listenLink = func(cfg udp.Config) (link.Link, error) { return udp.Listen(cfg) }

// registeredOps: a link registered by name (dpdk), one device per
// process; its MTU is the port's.
type registeredOps struct{}

func (registeredOps) deviceLimit() int { return 1 } // one port

func (registeredOps) openDevice(key deviceKey) (*sharedDevice, error) {
	open, ok := link.Lookup(key.link)
	if !ok {
		return nil, checkLink(key.link)
	}
	l, err := open(link.OpenConfig{})
	if err != nil {
		return nil, fmt.Errorf("netconn: %s link: %w", key.link, err)
	}
	mtu := verbs.MTU4096
	if m, ok := l.(interface{ MTU() int }); ok {
		if dm, err := softroce.MTUForIP(m.MTU(), !l.LocalAddr().Addr().Is4()); err == nil {
			mtu = dm
		}
	}
	name := fmt.Sprintf("softroce%d-%s", devicesOpened.Add(1)-1, key.link)
	return newDevice(key, name, l, mtu)
}

// rdmacoreOps: an rdma-core device (an RNIC's RoCEv2 port), found by the
// name the provider registered (verbs.RegisterProvider).
type rdmacoreOps struct{}

func (rdmacoreOps) deviceLimit() int { return 1 } // one context serves every QP

func (rdmacoreOps) openDevice(key deviceKey) (*sharedDevice, error) {
	open, ok := verbs.LookupProvider(ProviderRDMACore)
	if !ok {
		return nil, errNoRDMACore
	}
	dev, err := open(key.ip)
	if err != nil {
		return nil, err
	}
	return shareDevice(key, dev), nil
}

// wireOps: the process's devices on an external memif wire
// ($RSOCK_MEMIF_WIRE), one for all its connections.
type wireOps struct{}

func (wireOps) deviceLimit() int { return 1 } // one memif connection

func (wireOps) openDevice(key deviceKey) (*sharedDevice, error) {
	return openWireDevice(key, strings.TrimPrefix(key.link, linkWirePrefix))
}

// linkWirePrefix starts the device key's link of a device on an external
// memif wire; the socket path follows.
const linkWirePrefix = "memif-wire:"

// opsFor returns what opens the devices of a device key's link.
func opsFor(provider, linkName string) any {
	if strings.HasPrefix(linkName, linkWirePrefix) {
		return wireOps{}
	}
	if provider == ProviderRDMACore {
		return rdmacoreOps{}
	}
	if e, ok := lookupLink(linkName); ok {
		return e.ops
	}
	return nil
}
