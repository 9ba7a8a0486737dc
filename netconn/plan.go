package netconn

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/verbs"
)

// The connection plan: what a connection runs on, decided by one pure
// function (ChoosePlan) from the settings, the two addresses, what this
// host has and the peer's Hello. Dialer and listener run it as short
// symmetric steps:
//
//  1. The dialer plans before it acquires any device or sends anything
//     (Peer nil): a same-host link to offer (shm, memif), a RoCE link (rdma-core,
//     dpdk, udp) and its device, or TCP with a reason.
//  2. The listener plans from the dialer's Hello: it takes the offer, or
//     answers the RoCE endpoint from a link of its own, or declines with
//     the reason's kind.
//  3. The dialer checks the listener's Accept against what it offered
//     (Offered), and confirms or declines.
//
// The rules:
//   - auto (provider and link) never runs slower than TCP: on one host the
//     fastest same-host link (shm, then memif), else an rdma-core device; between
//     hosts an rdma-core device with a RoCEv2 GID for the local IP, else
//     TCP (FallbackNoFastPath). Soft-RoCE over the kernel's UDP is slower
//     than TCP, so it runs only when a setting names it: RSOCK_LINK=udp,
//     or RSOCK_PROVIDER=softroce (which wants soft-RoCE, and between hosts
//     has only udp, or dpdk when named).
//   - A listener answers the RoCE link a dialer asks for (a dialer asks
//     for udp only when its settings name it, or it is an rdma-core
//     device) with its fastest RoCE link: rdma-core, a named dpdk, udp.
//   - A same-host link is offered only to, and taken only from, a peer on
//     this host (loopback or the same IP), and only as an offer this
//     package makes (an abstract socket named @rsock-memif-... or
//     rsock-shm-..., or the ID of a live shm channel to the same process).
//   - A RoCE (or memif wire) peer's GID must be the address the TCP connection reached
//     (after unmapping IPv4-mapped addresses), both ways; the RoCE
//     traffic of a connection goes nowhere else (FallbackPeerAddress).
//   - A setting that names a link is kept: the connection runs on it or on
//     TCP, never on another link.

// PlanInput is what ChoosePlan decides from.
type PlanInput struct {
	// Provider and Link are the settings after the environment: auto, or
	// a name (ProviderTCP never reaches the plan on the dialer's side).
	Provider, Link string
	// Wire is the external memif wire the process's devices share
	// ($RSOCK_MEMIF_WIRE), or "".
	Wire string
	// Local and Remote are the IPs of the TCP connection's two ends.
	Local, Remote netip.Addr
	// Host is what this host has.
	Host HostFacts
	// Side is the deciding end: SideDialer or SideListener.
	Side string
	// Peer is the peer's Hello: nil in the dialer's first step, the
	// dialer's Hello for the listener, the listener's Accept in the
	// dialer's last step (with Offered).
	Peer *fallback.Hello
	// Offered is the plan of the dialer's first step, in its last step.
	Offered *Plan
}

// HostFacts is what this host has, as the plan sees it.
type HostFacts struct {
	// RDMACore is nil when an rdma-core device may serve the local IP
	// (the provider is built in, and no device was found missing lately),
	// else why not. Errors that match verbs.ErrNoRDMA or mean the
	// provider is not built in are not worth a note.
	RDMACore error
	// SameHost maps each same-host link to nil when it can be set up now,
	// else to why not; a link missing from the map cannot be.
	SameHost map[string]error
	// LinkNets are the networks of the links the settings name whose
	// addresses are configured apart from the kernel's (a dpdk port's
	// RSOCK_DPDK_IP prefix): a peer's RoCE address on one of them need not
	// be its TCP address, since the operator put both ends there.
	LinkNets []netip.Prefix
}

// Plan is what a connection runs on.
type Plan struct {
	// Provider is shm, softroce or rdmacore.
	Provider string
	// Link is the link: shm, memif, udp, dpdk, a registered one, or "roce" for
	// an rdma-core device's own port.
	Link string
	// Offer: a same-host link that the dialer offers in its Hello and the
	// listener connects to (shm: a channel the two processes share; memif:
	// a device of the connection's own).
	Offer bool
	// Wire is the external memif wire of a Link memif without Offer.
	Wire string
	// SameHost: both ends are on this host.
	SameHost bool
	// Note says why a faster choice was passed over, or is nil.
	Note *FallbackError
}

// ChoosePlan decides what a connection runs on (see the rules above). Its
// error is a *FallbackError: the connection runs on TCP, for that reason.
// It does no I/O.
func ChoosePlan(in PlanInput) (Plan, error) {
	p, fe := choose(in)
	if fe != nil {
		return Plan{}, fe
	}
	return p, nil
}

func choose(in PlanInput) (Plan, *FallbackError) {
	same := sameHost(in.Local, in.Remote)
	if in.Provider == ProviderTCP {
		return Plan{}, fallbackf(FallbackRDMAOff, in.Side, "RDMA is turned off on this "+in.Side)
	}
	var p Plan
	var fe *FallbackError
	switch {
	case in.Peer == nil:
		p, fe = chooseOffer(in, same)
	case in.Offered != nil:
		p, fe = chooseConfirm(in)
	default:
		p, fe = chooseAnswer(in, same)
	}
	p.SameHost = same
	return p, fe
}

// allowed reports whether the settings let a connection run on e.
func allowed(in PlanInput, e linkEntry) bool {
	if in.Provider != ProviderAuto && e.provider != in.Provider {
		return false
	}
	if e.provider == ProviderRDMACore {
		// The link setting names the soft-RoCE link that rdma-core's own
		// port stands in for: any but a same-host one.
		named, ok := lookupLink(in.Link)
		return in.Link == LinkAuto || in.Provider == ProviderRDMACore || ok && named.scope == scopeNetwork
	}
	if in.Link == LinkAuto {
		return !e.byName
	}
	return e.name == in.Link
}

// wants reports whether the settings ask for soft-RoCE on a slow link
// where auto would not: the provider or the link is named.
func wantsSlow(in PlanInput) bool {
	return in.Provider != ProviderAuto || in.Link != LinkAuto
}

// rdmacoreNote is the note of a plan that passed over rdma-core, or nil
// when that is not worth saying (no RDMA on this host, not built in).
func rdmacoreNote(in PlanInput) *FallbackError {
	err := in.Host.RDMACore
	if err == nil || errors.Is(err, verbs.ErrNoRDMA) || errors.Is(err, errNoRDMACore) {
		return nil
	}
	return &FallbackError{Kind: FallbackSetup, Side: in.Side, Err: fmt.Errorf("rdmacore not used, soft-RoCE instead: %w", err)}
}

// chooseOffer is the dialer's first step.
func chooseOffer(in PlanInput, same bool) (Plan, *FallbackError) {
	if in.Wire != "" && in.Provider != ProviderRDMACore {
		return Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Wire: in.Wire}, nil
	}
	var passed []string // why fast links were passed over
	for _, e := range entries(in.Link) {
		if !allowed(in, e) {
			continue
		}
		if e.scope == scopeHost {
			why, ok := in.Host.SameHost[e.name]
			switch {
			case !same && e.name == in.Link:
				return Plan{}, fallbackf(FallbackNotSameHost, in.Side,
					fmt.Sprintf("%s is required and not possible: the peer %v is not on this host", e.name, in.Remote))
			case !same:
				continue
			case !ok || why != nil:
				if !ok {
					why = errors.New("not available in this binary")
				}
				if e.name == in.Link {
					return Plan{}, &FallbackError{Kind: FallbackSetup, Side: in.Side, Err: fmt.Errorf("%s is required and not possible: %w", e.name, why)}
				}
				passed = append(passed, e.name+": "+why.Error())
				continue
			}
			return Plan{Provider: e.provider, Link: e.name, Offer: true}, nil
		}
		if e.provider == ProviderRDMACore && in.Host.RDMACore != nil {
			if in.Provider == ProviderRDMACore {
				return Plan{}, &FallbackError{Kind: FallbackSetup, Side: in.Side, Err: in.Host.RDMACore}
			}
			if rdmacoreNote(in) != nil { // not when the host has no RDMA, or the binary no rdmacore
				passed = append(passed, "rdmacore: "+in.Host.RDMACore.Error())
			}
			continue
		}
		if !e.fast && !wantsSlow(in) {
			continue // auto never runs slower than TCP
		}
		p := Plan{Provider: e.provider, Link: e.name}
		if e.provider != ProviderRDMACore {
			p.Note = rdmacoreNote(in)
		}
		return p, nil
	}
	msg := "between hosts, auto runs RDMA only on an rdma-core device (with a RoCEv2 GID for " + in.Local.String() +
		") or a dpdk link that RSOCK_LINK names: soft-RoCE over the kernel's UDP is slower than TCP, and runs with RSOCK_LINK=udp"
	if same {
		msg = "on one host, auto runs RDMA over a same-host link, and none can be set up"
	}
	for _, p := range passed {
		msg += "; " + p
	}
	return Plan{}, fallbackf(FallbackNoFastPath, in.Side, "no link faster than TCP to "+in.Remote.String()+": "+msg)
}

// chooseAnswer is the listener's step, from the dialer's Hello.
func chooseAnswer(in PlanInput, same bool) (Plan, *FallbackError) {
	h := in.Peer
	if h.Capabilities&fallback.CapStream == 0 {
		return Plan{}, fallbackf(FallbackSetup, in.Side, "the dialer's Hello does not offer a stream")
	}
	var refused *FallbackError // why an offer was not taken
	for _, e := range linkTable {
		if e.scope != scopeHost || e.offerCap == 0 || h.Capabilities&e.offerCap == 0 {
			continue
		}
		o, _ := e.ops.(offerer)
		switch why, ok := in.Host.SameHost[e.name]; {
		case !same:
			refused = fallbackf(FallbackNotSameHost, in.Side, fmt.Sprintf("the dialer %v offered %s from another host", in.Remote, e.name))
		case o == nil || !o.validOffer(h):
			refused = fallbackf(FallbackSetup, in.Side, fmt.Sprintf("the dialer's %s offer is not one rsock makes", e.name))
		case !allowed(in, e) || in.Wire != "":
			refused = fallbackf(FallbackSetup, in.Side, fmt.Sprintf("this listener does not run %s (provider %s, link %s)", e.name, in.Provider, in.Link))
		case !ok || why != nil:
			if !ok {
				why = errors.New("not available in this binary")
			}
			refused = &FallbackError{Kind: FallbackSetup, Side: in.Side, Err: fmt.Errorf("%s: %w", e.name, why)}
		default:
			return Plan{Provider: e.provider, Link: e.name, Offer: true}, nil
		}
	}
	peerLink, known := lookupLink(h.Link)
	switch {
	case known && peerLink.scope == scopeHost && h.Capabilities&peerLink.offerCap != 0:
		// An offer alone, not taken.
		if refused == nil {
			refused = fallbackf(FallbackSetup, in.Side, "the dialer offered "+h.Link+" only")
		}
		return Plan{}, refused
	case in.Wire == "" && lookupScope(in.Link) == scopeHost:
		if !same {
			return Plan{}, fallbackf(FallbackNotSameHost, in.Side, fmt.Sprintf("this listener runs %s only, and the dialer %v is not on this host", in.Link, in.Remote))
		}
		return Plan{}, fallbackf(FallbackSetup, in.Side, "this listener runs "+in.Link+" only, and the dialer did not offer it")
	case h.Link == LinkMemif:
		// A memif wire's device (no offer): it reaches peers on the same
		// wire.
		if in.Wire == "" || in.Provider == ProviderRDMACore {
			return Plan{}, fallbackf(FallbackSetup, in.Side, "link \"memif\" (a memif wire) is not configured on this listener")
		}
		if fe := checkPeerAddress(in, h); fe != nil {
			return Plan{}, fe
		}
		return Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Wire: in.Wire}, nil
	case !known || !peerLink.roce:
		return Plan{}, fallbackf(FallbackSetup, in.Side, fmt.Sprintf("link %q is not supported", h.Link))
	}
	if fe := checkPeerAddress(in, h); fe != nil {
		return Plan{}, fe
	}
	if in.Wire != "" && in.Provider != ProviderRDMACore {
		return Plan{}, fallbackf(FallbackSetup, in.Side, fmt.Sprintf("link %q is not supported on a memif wire", h.Link))
	}
	for _, e := range entries(in.Link) {
		if e.scope != scopeNetwork || !e.roce || !allowed(in, e) {
			continue
		}
		if e.provider == ProviderRDMACore && in.Host.RDMACore != nil {
			if in.Provider == ProviderRDMACore {
				return Plan{}, &FallbackError{Kind: FallbackSetup, Side: in.Side, Err: in.Host.RDMACore}
			}
			continue
		}
		p := Plan{Provider: e.provider, Link: e.name, Note: refused}
		if p.Note == nil && e.provider != ProviderRDMACore {
			p.Note = rdmacoreNote(in)
		}
		return p, nil
	}
	return Plan{}, fallbackf(FallbackSetup, in.Side, fmt.Sprintf("link %q is not supported", h.Link))
}

// lookupScope is the scope of a link name (scopeNetwork if unknown).
func lookupScope(name string) linkScope {
	e, _ := lookupLink(name)
	return e.scope
}

// chooseConfirm is the dialer's last step, from the listener's Accept.
func chooseConfirm(in PlanInput) (Plan, *FallbackError) {
	p, h := *in.Offered, in.Peer
	switch {
	case p.Offer:
		if h.Link != p.Link {
			return Plan{}, fallbackf(FallbackSetup, in.Side, fmt.Sprintf("the listener answered a %s offer on link %q", p.Link, h.Link))
		}
		return p, nil
	case p.Wire != "":
		if h.Link != LinkMemif {
			return Plan{}, fallbackf(FallbackSetup, in.Side, fmt.Sprintf("peer link %q is not compatible", h.Link))
		}
		if fe := checkPeerAddress(in, h); fe != nil {
			return Plan{}, fe
		}
		return p, nil
	}
	if !linksInteroperate(p.Link, h.Link) || h.Capabilities&fallback.CapStream == 0 {
		return Plan{}, fallbackf(FallbackSetup, in.Side, fmt.Sprintf("peer link %q is not compatible", h.Link))
	}
	if fe := checkPeerAddress(in, h); fe != nil {
		return Plan{}, fe
	}
	return p, nil
}

// checkPeerAddress checks that the RoCE address in the peer's Hello is
// the address the TCP connection reached, or on the network of a link
// the settings name whose addresses the operator configured apart from
// the kernel's (a dpdk port).
func checkPeerAddress(in PlanInput, h *fallback.Hello) *FallbackError {
	gid := verbs.GID(h.GID).Addr()
	if gid == in.Remote.Unmap().WithZone("") {
		return nil
	}
	for _, n := range in.Host.LinkNets {
		if n.Contains(gid) {
			return nil
		}
	}
	return fallbackf(FallbackPeerAddress, in.Side, fmt.Sprintf("the peer's RoCE address %v is not its TCP address %v", gid, in.Remote.Unmap()))
}

// RoCELink returns the soft-RoCE link that a verbs-level endpoint talking
// to a RoCE peer (an RNIC, rxe, perftest's programs) at peer runs on, from
// local, for the link setting link (empty: $RSOCK_LINK, else auto). It is
// ChoosePlan's answer to a peer that is an RDMA device: udp for auto, a
// registered link (dpdk) that the setting names, and an error for a link
// that cannot reach such a peer (memif).
func RoCELink(link string, local, peer netip.Addr) (string, error) {
	_, link, err := Settings(ProviderSoftRoCE, link)
	if err != nil {
		return "", err
	}
	in := PlanInput{Provider: ProviderSoftRoCE, Link: link, Local: local, Remote: peer, Side: SideDialer,
		Peer: &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: ProviderRDMACore,
			Link: rdmacoreLink, GID: verbs.GIDFromAddr(peer)}}
	p, err := ChoosePlan(in)
	if err != nil {
		return "", err
	}
	return p.Link, nil
}
