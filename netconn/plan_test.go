package netconn

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/verbs"
)

// The plan's tables: every combination of settings, same host or not, an
// rdma-core device or not, memif possible or not, and the peer's Hello,
// with the plan or the reason's kind that ChoosePlan gives. No network.
//
// A row lists eight outcomes, for these facts in this order:
//
//	same host:  yes yes yes yes  no  no  no  no
//	rdma-core:  yes yes  no  no yes yes  no  no
//	memif:      yes  no yes  no yes  no yes  no
//
// An outcome is the plan's link (a "+" marks an offer), or "-kind" for a
// fallback to TCP of that kind.

var planFacts = []struct{ same, rdma, memif bool }{
	{true, true, true}, {true, true, false}, {true, false, true}, {true, false, false},
	{false, true, true}, {false, true, false}, {false, false, true}, {false, false, false},
}

var (
	planLocal      = netip.MustParseAddr("10.0.0.1")
	planRemoteHost = netip.MustParseAddr("10.0.0.2")
)

// planIn makes the input of a row's column.
func planIn(settings string, col int, side string) PlanInput {
	provider, link, _ := strings.Cut(settings, "/")
	f := planFacts[col]
	in := PlanInput{Provider: provider, Link: link, Local: planLocal, Remote: planRemoteHost, Side: side,
		Host: HostFacts{RDMACore: errors.New("no device with a RoCEv2 GID for 10.0.0.1"), SameHost: map[string]error{LinkMemif: errMemifFull}}}
	if f.same {
		in.Remote = planLocal
	}
	if f.rdma {
		in.Host.RDMACore = nil
	}
	if f.memif {
		in.Host.SameHost[LinkMemif] = nil
	}
	return in
}

// outcome renders a plan or a fallback as in the tables.
func outcome(p Plan, err error) string {
	if err != nil {
		var fe *FallbackError
		if !errors.As(err, &fe) {
			return "!" + err.Error()
		}
		return "-" + fe.Kind
	}
	s := p.Link
	if p.Offer {
		s += "+"
	}
	if p.Wire != "" {
		s += "@wire"
	}
	return s
}

func checkGrid(t *testing.T, name string, want map[string]string, run func(settings string, col int) (Plan, error)) {
	t.Helper()
	for settings, row := range want {
		wants := strings.Fields(row)
		if len(wants) != len(planFacts) {
			t.Fatalf("%s %s: %d outcomes, want %d", name, settings, len(wants), len(planFacts))
		}
		var got []string
		for col := range planFacts {
			p, err := run(settings, col)
			got = append(got, outcome(p, err))
		}
		if strings.Join(got, " ") != strings.Join(wants, " ") {
			t.Errorf("%s %s:\n got  %s\n want %s", name, settings, strings.Join(got, " "), strings.Join(wants, " "))
		}
	}
}

// TestPlanDial: the dialer's first step, before anything is sent.
func TestPlanDial(t *testing.T) {
	checkGrid(t, "dial", map[string]string{
		"auto/auto":      "memif+ roce memif+ -no_fast_path roce roce -no_fast_path -no_fast_path",
		"auto/udp":       "roce roce udp udp roce roce udp udp",
		"auto/memif":     "memif+ -setup memif+ -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/dpdk":      "roce roce dpdk dpdk roce roce dpdk dpdk",
		"softroce/auto":  "memif+ udp memif+ udp udp udp udp udp",
		"softroce/udp":   "udp udp udp udp udp udp udp udp",
		"softroce/memif": "memif+ -setup memif+ -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"softroce/dpdk":  "dpdk dpdk dpdk dpdk dpdk dpdk dpdk dpdk",
		"rdmacore/auto":  "roce roce -setup -setup roce roce -setup -setup",
		"rdmacore/udp":   "roce roce -setup -setup roce roce -setup -setup",
		"tcp/auto":       "-rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off",
	}, func(settings string, col int) (Plan, error) {
		return ChoosePlan(planIn(settings, col, SideDialer))
	})
}

// Peer Hellos for the listener's step.
func planHello(kind string, remote netip.Addr) *fallback.Hello {
	h := &fallback.Hello{Version: fallback.Version, Capabilities: fallback.CapStream, Provider: ProviderSoftRoCE, Link: LinkUDP,
		GID: verbs.GIDFromAddr(remote), UDPPort: 4791, QPN: 0x11, MTU: 1024, RingSize: 4096, RecvDepth: 64}
	offer := func() {
		h.Capabilities |= fallback.CapMemif
		h.MemifSocket, h.MemifSecret = "@rsock-memif-0123456789abcdef0123456789abcdef", "0123456789abcdef012345"
	}
	switch kind {
	case "memif-offer": // what a dialer sends: the offer alone
		h.Link = LinkMemif
		offer()
	case "memif-path": // an offer naming a file path
		h.Link = LinkMemif
		offer()
		h.MemifSocket = "/run/vpp/memif.sock"
	case "udp+offer": // an offer beside a udp endpoint (older dialers)
		offer()
	case "udp":
	case "roce":
		h.Provider, h.Link = ProviderRDMACore, rdmacoreLink
	case "dpdk":
		h.Link = LinkDPDK
	case "udp-victim": // a RoCE address that is not the TCP peer's
		h.GID = verbs.GIDFromAddr(netip.MustParseAddr("10.9.9.9"))
	case "pipe":
		h.Link = "pipe"
	case "wire":
		h.Link = LinkMemif
	case "wire-victim":
		h.Link = LinkMemif
		h.GID = verbs.GIDFromAddr(netip.MustParseAddr("10.9.9.9"))
	default:
		panic(kind)
	}
	return h
}

// TestPlanAccept: the listener's step, for each Hello a dialer may send.
func TestPlanAccept(t *testing.T) {
	grid := map[string]string{
		// A dialer's memif offer: taken only on one host, only by settings
		// that run memif, only when it can be set up.
		"auto/auto memif-offer":     "memif+ -setup memif+ -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/udp memif-offer":      "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/memif memif-offer":    "memif+ -setup memif+ -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"softroce/auto memif-offer": "memif+ -setup memif+ -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"rdmacore/auto memif-offer": "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"tcp/auto memif-offer":      "-rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off",
		"auto/auto memif-path":      "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/memif memif-path":     "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/auto udp+offer":       "memif+ roce memif+ udp roce roce udp udp",
		"auto/udp udp+offer":        "roce roce udp udp roce roce udp udp",
		// A RoCE endpoint: answered with the listener's fastest RoCE link.
		"auto/auto udp":      "roce roce udp udp roce roce udp udp",
		"auto/udp udp":       "roce roce udp udp roce roce udp udp",
		"auto/memif udp":     "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/dpdk udp":      "roce roce dpdk dpdk roce roce dpdk dpdk",
		"softroce/auto udp":  "udp udp udp udp udp udp udp udp",
		"softroce/udp udp":   "udp udp udp udp udp udp udp udp",
		"rdmacore/auto udp":  "roce roce -setup -setup roce roce -setup -setup",
		"tcp/auto udp":       "-rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off",
		"auto/auto roce":     "roce roce udp udp roce roce udp udp",
		"softroce/udp roce":  "udp udp udp udp udp udp udp udp",
		"auto/auto dpdk":     "roce roce udp udp roce roce udp udp",
		"softroce/dpdk dpdk": "dpdk dpdk dpdk dpdk dpdk dpdk dpdk dpdk",
		// A RoCE address that is not the TCP peer's.
		"auto/auto udp-victim":     "-peer_address -peer_address -peer_address -peer_address -peer_address -peer_address -peer_address -peer_address",
		"softroce/udp udp-victim":  "-peer_address -peer_address -peer_address -peer_address -peer_address -peer_address -peer_address -peer_address",
		"rdmacore/auto udp-victim": "-peer_address -peer_address -peer_address -peer_address -peer_address -peer_address -peer_address -peer_address",
		// Links that do not reach ours.
		"auto/auto pipe": "-setup -setup -setup -setup -setup -setup -setup -setup",
		"auto/auto wire": "-setup -setup -setup -setup -setup -setup -setup -setup",
	}
	checkGrid(t, "accept", grid, func(row string, col int) (Plan, error) {
		settings, kind, _ := strings.Cut(row, " ")
		in := planIn(settings, col, SideListener)
		in.Peer = planHello(kind, in.Remote)
		return ChoosePlan(in)
	})
}

// TestPlanConfirm: the dialer's last step, the listener's Accept against
// what the dialer offered.
func TestPlanConfirm(t *testing.T) {
	remote := planRemoteHost
	for _, tc := range []struct {
		offered Plan
		reply   string
		want    string
	}{
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Offer: true}, "wire", "memif+"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Offer: true}, "udp", "-setup"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, "udp", "udp"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, "roce", "udp"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, "dpdk", "udp"},
		{Plan{Provider: ProviderRDMACore, Link: rdmacoreLink}, "udp", "roce"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, "udp-victim", "-peer_address"},
		{Plan{Provider: ProviderRDMACore, Link: rdmacoreLink}, "udp-victim", "-peer_address"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, "wire", "-setup"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}, "pipe", "-setup"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Wire: "/run/wire.sock"}, "wire", "memif@wire"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Wire: "/run/wire.sock"}, "udp", "-setup"},
		{Plan{Provider: ProviderSoftRoCE, Link: LinkMemif, Wire: "/run/wire.sock"}, "wire-victim", "-peer_address"},
	} {
		in := planIn("auto/auto", 7, SideDialer)
		offered := tc.offered
		in.Offered, in.Peer = &offered, planHello(tc.reply, remote)
		if got := outcome(ChoosePlan(in)); got != tc.want {
			t.Errorf("offered %+v, reply %s: %s, want %s", tc.offered, tc.reply, got, tc.want)
		}
	}
}

// TestPlanPeerAddress: the RoCE address in a Hello must be the TCP peer's,
// IPv4 and IPv6, whichever way the TCP address is written (IPv4-mapped on
// a dual-stack socket, with a zone).
func TestPlanPeerAddress(t *testing.T) {
	for _, tc := range []struct {
		remote, gid string
		ok          bool
	}{
		{"10.0.0.2", "10.0.0.2", true},
		{"::ffff:10.0.0.2", "10.0.0.2", true},
		{"10.0.0.2", "::ffff:10.0.0.2", true},
		{"fd00::2", "fd00::2", true},
		{"fe80::2%veth0", "fe80::2", true},
		{"127.0.0.1", "127.0.0.2", false},
		{"10.0.0.2", "10.0.0.3", false},
		{"::ffff:10.0.0.2", "10.0.0.3", false},
		{"fd00::2", "fd00::3", false},
		{"10.0.0.2", "::10.0.0.2", false}, // IPv4-compatible is not IPv4-mapped
		{"fd00::2", "::ffff:253.0.0.2", false},
	} {
		for _, side := range []string{SideListener, SideDialer} {
			in := PlanInput{Provider: ProviderSoftRoCE, Link: LinkUDP, Local: planLocal, Remote: netip.MustParseAddr(tc.remote), Side: side}
			h := planHello("udp", in.Remote)
			h.GID = netip.MustParseAddr(tc.gid).As16()
			in.Peer = h
			if side == SideDialer {
				in.Offered = &Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}
			}
			got := outcome(ChoosePlan(in))
			if tc.ok && got != LinkUDP || !tc.ok && got != "-"+FallbackPeerAddress {
				t.Errorf("%s: TCP peer %s, GID %s: %s", side, tc.remote, tc.gid, got)
			}
		}
	}
}

// TestPlanPeerAddressLinkNet: a link whose addresses the operator
// configured apart from the kernel's (a dpdk port's prefix) may name a
// peer's RoCE address on that prefix although it is not the TCP peer's;
// any other address is still refused, and a udp-only end trusts nothing
// but the TCP address.
func TestPlanPeerAddressLinkNet(t *testing.T) {
	dpdkNet := netip.MustParsePrefix("10.77.0.0/24")
	for _, tc := range []struct {
		gid  string
		nets []netip.Prefix
		ok   bool
	}{
		{"10.77.0.2", []netip.Prefix{dpdkNet}, true},
		{"10.77.1.2", []netip.Prefix{dpdkNet}, false},
		{"127.0.0.2", []netip.Prefix{dpdkNet}, false},
		{"10.77.0.2", nil, false},
	} {
		for _, side := range []string{SideListener, SideDialer} {
			in := PlanInput{Provider: ProviderSoftRoCE, Link: LinkUDP, Local: planLocal, Remote: netip.MustParseAddr("127.0.0.1"), Side: side}
			in.Host.LinkNets = tc.nets
			h := planHello("udp", in.Remote)
			h.GID = netip.MustParseAddr(tc.gid).As16()
			in.Peer = h
			if side == SideDialer {
				in.Offered = &Plan{Provider: ProviderSoftRoCE, Link: LinkUDP}
			}
			got := outcome(ChoosePlan(in))
			if tc.ok && got != LinkUDP || !tc.ok && got != "-"+FallbackPeerAddress {
				t.Errorf("%s: GID %s, link networks %v: %s", side, tc.gid, tc.nets, got)
			}
		}
	}
}

// TestPlanWire: with a memif wire, connections run on it, and only with
// peers on it.
func TestPlanWire(t *testing.T) {
	in := planIn("auto/auto", 7, SideDialer)
	in.Wire = "/run/wire.sock"
	if got := outcome(ChoosePlan(in)); got != "memif@wire" {
		t.Errorf("dial: %s", got)
	}
	in.Side = SideListener
	for kind, want := range map[string]string{"wire": "memif@wire", "udp": "-setup", "memif-offer": "-not_same_host", "wire-victim": "-peer_address"} {
		in.Peer = planHello(kind, in.Remote)
		if got := outcome(ChoosePlan(in)); got != want {
			t.Errorf("accept %s: %s, want %s", kind, got, want)
		}
	}
}

// TestPlanReasons: what the reasons say, and that the notes of a plan
// that passed over rdma-core are kept only when the host has RDMA.
func TestPlanReasons(t *testing.T) {
	in := planIn("auto/auto", 7, SideDialer)
	_, err := ChoosePlan(in)
	var fe *FallbackError
	if !errors.As(err, &fe) || fe.Side != SideDialer || !strings.Contains(fe.Error(), "RSOCK_LINK=udp") || !strings.Contains(fe.Error(), "no device with a RoCEv2 GID") {
		t.Errorf("auto between hosts without RDMA: %v", err)
	}
	in = planIn("auto/udp", 7, SideDialer)
	p, err := ChoosePlan(in)
	if err != nil || p.Note == nil || !strings.Contains(p.Note.Error(), "rdmacore not used") {
		t.Errorf("auto/udp without a device: %+v, %v", p, err)
	}
	for _, quiet := range []error{errNoRDMACore, fmt.Errorf("rdmacore: %w", verbs.ErrNoRDMA)} {
		in.Host.RDMACore = quiet
		if p, err := ChoosePlan(in); err != nil || p.Note != nil {
			t.Errorf("auto/udp, %v: %+v, %v", quiet, p, err)
		}
	}
}

// TestDeclineCarriesKindOnly: what a Decline says is the kind and fixed
// text, and the peer reads the kind back.
func TestDeclineCarriesKindOnly(t *testing.T) {
	for _, kind := range FallbackKinds {
		text := declineText(kind)
		fe := fromDecline(text, SideListener)
		want := kind
		if kind == FallbackPlainServer || kind == FallbackDialer {
			want = FallbackDeclined // not kinds a listener declines with
		}
		if kind != FallbackPlainServer && kind != FallbackDialer && fe.Kind != want {
			t.Errorf("%s: read back as %s (%q)", kind, fe.Kind, text)
		}
		if !strings.HasPrefix(fe.Error(), "declined by the listener: ") {
			t.Errorf("%s: %q", kind, fe.Error())
		}
	}
	if fe := fromDecline("listener busy: 64 rsock handshakes in progress", SideListener); fe.Kind != FallbackDeclined {
		t.Errorf("free text read as kind %s", fe.Kind)
	}
	if fe := fromDecline(declineText(FallbackSetup), SideDialer); fe.Kind != FallbackSetup || fe.Side != SideDialer {
		t.Errorf("a dialer's decline: %+v", fe)
	}
}
