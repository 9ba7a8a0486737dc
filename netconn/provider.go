package netconn

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// The rdmacore provider is not imported here: binaries that want it
// blank-import verbs/rdmacore (behind its build tag), which registers it
// with verbs.RegisterProvider, and netconn finds it by name.

// rdmacoreLink is what rdma-core devices report as their link
// (verbs/rdmacore.LinkName): RoCEv2 on the device's own port, the same
// wire as soft-RoCE's udp link.
const rdmacoreLink = "roce"

// rdmacoreMissTTL is how long auto remembers that rdma-core has no device
// for an IP before it asks again: a dial should not list the host's
// devices each time.
var rdmacoreMissTTL = 10 * time.Second

type rdmacoreMiss struct {
	why   string
	quiet bool // the host has no RDMA at all: not worth a FallbackReason
	until time.Time
}

var rdmacoreMisses = struct {
	sync.Mutex
	m map[netip.Addr]rdmacoreMiss
}{m: make(map[netip.Addr]rdmacoreMiss)}

// rdmacoreBuiltIn reports whether the rdmacore provider is registered.
func rdmacoreBuiltIn() bool {
	_, ok := verbs.LookupProvider(ProviderRDMACore)
	return ok
}

// acquireFor returns a device for a connection from the local address ip
// with the settings' provider. Auto takes an rdma-core device when the
// provider is built in and one has an active port with a RoCEv2 GID for
// ip (unless memif is asked for), else a soft-RoCE device. why says why
// auto passed over rdma-core on a host that has RDMA devices; on a host
// without any it is empty.
func acquireFor(set settings, ip netip.Addr) (d *sharedDevice, why string, err error) {
	switch {
	case set.provider == ProviderRDMACore:
		d, err = acquireDevice(ProviderRDMACore, rdmacoreLink, ip)
		return d, "", err
	case set.provider == ProviderAuto && rdmacoreBuiltIn() && set.wire == "" && set.link != LinkMemif:
		ip = ip.Unmap()
		rdmacoreMisses.Lock()
		miss, known := rdmacoreMisses.m[ip]
		if known && time.Now().After(miss.until) {
			delete(rdmacoreMisses.m, ip)
			known = false
		}
		rdmacoreMisses.Unlock()
		if !known {
			if d, err = acquireDevice(ProviderRDMACore, rdmacoreLink, ip); err == nil {
				return d, "", nil
			}
			miss = rdmacoreMiss{why: err.Error(), quiet: errors.Is(err, verbs.ErrNoRDMA), until: time.Now().Add(rdmacoreMissTTL)}
			rdmacoreMisses.Lock()
			rdmacoreMisses.m[ip] = miss
			rdmacoreMisses.Unlock()
		}
		if !miss.quiet {
			why = "rdmacore not used, soft-RoCE instead: " + miss.why
		}
		d, err = acquireDevice(ProviderSoftRoCE, set.sharedLink(), ip)
		if err != nil && why != "" {
			err = fmt.Errorf("%s; %w", why, err)
		}
		return d, why, err
	}
	d, err = acquireDevice(set.provider, set.sharedLink(), ip)
	return d, "", err
}

// openRDMACore opens a registered rdma-core device for key.ip.
func openRDMACore(key deviceKey) (*sharedDevice, error) {
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

// roceLinks are the links that carry RoCEv2 in IP/UDP to port 4791 on an
// IP network, to any RoCEv2 peer: soft-RoCE's udp link (through the
// kernel) and dpdk link (on a DPDK port), and rdma-core devices. Their
// peers interoperate (with IBTA go-back-N when one end is an rdma-core
// QP, which does not offer selective repeat).
var roceLinks = map[string]bool{LinkUDP: true, LinkDPDK: true, rdmacoreLink: true}

// linksInteroperate reports whether a device on link a reaches a peer on
// link b.
func linksInteroperate(a, b string) bool { return a == b || roceLinks[a] && roceLinks[b] }
