package netconn

import (
	"errors"
	"net/netip"
	"sync"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// The rdmacore provider is not imported here: binaries that want it
// blank-import verbs/rdmacore (behind its build tag), which registers it
// with verbs.RegisterProvider, and netconn finds it by name.

// rdmacoreMissTTL is how long auto remembers that rdma-core has no device
// for an IP before it asks again: a dial should not list the host's
// devices each time.
var rdmacoreMissTTL = 10 * time.Second

type rdmacoreMiss struct {
	err   error
	until time.Time
}

var rdmacoreMisses = struct {
	sync.Mutex
	m map[netip.Addr]rdmacoreMiss
}{m: make(map[netip.Addr]rdmacoreMiss)}

// errNoRDMACore is the provider failure when rdma-core support is not
// compiled in.
var errNoRDMACore = errors.New("netconn: the rdmacore provider is not built into this binary")

// rdmacoreBuiltIn reports whether the rdmacore provider is registered.
func rdmacoreBuiltIn() bool {
	_, ok := verbs.LookupProvider(ProviderRDMACore)
	return ok
}

// rdmacoreFact is HostFacts.RDMACore for the local IP ip: nil when the
// provider is built in and has not failed to find a device for ip lately.
func rdmacoreFact(ip netip.Addr) error {
	if !rdmacoreBuiltIn() {
		return errNoRDMACore
	}
	ip = ip.Unmap()
	rdmacoreMisses.Lock()
	defer rdmacoreMisses.Unlock()
	miss, known := rdmacoreMisses.m[ip]
	if known && time.Now().After(miss.until) {
		delete(rdmacoreMisses.m, ip)
		return nil
	}
	return miss.err
}

// noteRDMACoreMiss remembers for a while that rdma-core has no device for ip.
func noteRDMACoreMiss(ip netip.Addr, err error) {
	rdmacoreMisses.Lock()
	rdmacoreMisses.m[ip.Unmap()] = rdmacoreMiss{err: err, until: time.Now().Add(rdmacoreMissTTL)}
	rdmacoreMisses.Unlock()
}

// hostFacts gathers what the plan needs to know about this host for a
// connection from the local IP ip.
func hostFacts(set settings, ip netip.Addr) HostFacts {
	f := HostFacts{RDMACore: errNoRDMACore, SameHost: make(map[string]error, 1)}
	if set.provider == ProviderAuto || set.provider == ProviderRDMACore {
		f.RDMACore = rdmacoreFact(ip)
	}
	for _, e := range linkTable {
		if o, ok := e.ops.(offerer); ok {
			f.SameHost[e.name] = o.available()
		}
	}
	if set.link != LinkAuto {
		if n, ok := link.Network(set.link); ok {
			f.LinkNets = append(f.LinkNets, n)
		}
	}
	return f
}

// planInput is the plan's input for a connection between local and
// remote with the settings set.
func planInput(set settings, side string, local, remote netip.Addr) PlanInput {
	return PlanInput{
		Provider: set.provider, Link: set.link, Wire: set.wire,
		Local: local, Remote: remote,
		Host: hostFacts(set, local), Side: side,
	}
}

// acquirePlanned runs the plan for in and acquires the device of a plan
// on a shared device (none for an offer). When auto planned an rdma-core
// device that turns out missing, it remembers that and plans again.
func acquirePlanned(in PlanInput) (Plan, *sharedDevice, *FallbackError) {
	for {
		p, fe := choose(in)
		if fe != nil || p.Offer {
			return p, nil, fe
		}
		dev, err := acquireFor(p, in.Local)
		if err == nil {
			return p, dev, nil
		}
		if p.Provider == ProviderRDMACore && in.Provider == ProviderAuto && in.Host.RDMACore == nil {
			noteRDMACoreMiss(in.Local, err)
			in.Host.RDMACore = err
			continue
		}
		return p, nil, &FallbackError{Kind: FallbackSetup, Side: in.Side, Err: err}
	}
}

// acquireFor acquires a shared device for plan p from the local IP ip.
func acquireFor(p Plan, ip netip.Addr) (*sharedDevice, error) {
	if p.Wire != "" {
		return acquireDevice(ProviderSoftRoCE, linkWirePrefix+p.Wire, ip)
	}
	return acquireDevice(p.Provider, p.Link, ip)
}
