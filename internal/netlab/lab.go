package netlab

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Config describes a Lab.
type Config struct {
	// MTU of every veth; default 1500.
	MTU int
	// Relay puts a middle namespace M between A and B, for StartRelay.
	Relay bool
	// Router puts a middle namespace M between A and B that routes IP
	// between two subnets (A at 10.77.0.1/24 and fd77::1/64, B at
	// 10.77.1.2/24 and fd77:0:0:1::2/64, M at .254 and ::fe of each), as
	// a real router does: it forwards, and answers a datagram too large
	// for its outgoing link with ICMP "fragmentation needed" or "packet
	// too big". Lower the MTU of M's routes with SetRouterMTU. It
	// excludes Relay.
	Router bool
	// Prefix starts the names of the lab's namespaces; default "netlab".
	// A script that must clean up after a killed run can delete every
	// namespace whose name starts with a prefix of its own.
	Prefix string
}

// Namespace is one network namespace of a Lab.
type Namespace struct {
	// Name is the namespace's name, as ip netns knows it.
	Name string
	// Dev is its veth toward the other end (A and B), or the veth toward A
	// (M).
	Dev string
	// Dev2 is M's veth toward B; empty in A and B.
	Dev2 string
	// IPv4 and IPv6 are the addresses of an endpoint (A, B); invalid in M.
	IPv4, IPv6 netip.Addr

	mac string // an endpoint's link-layer address
}

// Addr returns the namespace's IPv6 address if ipv6 is true, else its
// IPv4 address.
func (ns *Namespace) Addr(ipv6 bool) netip.Addr {
	if ipv6 {
		return ns.IPv6
	}
	return ns.IPv4
}

// Lab is a set of network namespaces joined by veth pairs, made by New and
// removed by Close.
type Lab struct {
	cfg Config
	// A and B are the endpoints; M is the relay's namespace, nil without
	// Config.Relay.
	A, B, M *Namespace

	mu     sync.Mutex
	procs  map[*Proc]bool
	made   []string // namespaces created so far, in order
	closed bool
}

// Interface names. Each namespace has its own set of names, so these
// never clash with another lab's or the host's.
const (
	devA    = "nl-a"  // A's veth
	devB    = "nl-b"  // B's veth
	devMToA = "nl-ma" // M's veth toward A
	devMToB = "nl-mb" // M's veth toward B
)

// Addresses of the endpoints: private and unique local, and only ever
// inside the lab's namespaces.
var (
	addrA4 = netip.MustParseAddr("10.77.0.1")
	addrB4 = netip.MustParseAddr("10.77.0.2")
	addrA6 = netip.MustParseAddr("fd77::1")
	addrB6 = netip.MustParseAddr("fd77::2")
)

// Link-layer addresses of the endpoints' veths, fixed so that each end
// knows the other's as a permanent neighbour: random loss then never
// costs an ARP or neighbour discovery exchange (three lost probes in a
// row made a TCP connect fail with "no route to host" at 20% loss both
// ways).
const (
	macA = "02:77:00:00:00:01"
	macB = "02:77:00:00:00:02"
)

// ErrNotRoot is Check's error when the process is not root.
var ErrNotRoot = errors.New("not root: cannot create network namespaces")

// Check reports why no Lab can be made here: not root, or a missing tool
// (ip from iproute2, nft from nftables, ethtool). Tests skip with its
// message.
func Check() error {
	if os.Geteuid() != 0 {
		return ErrNotRoot
	}
	for _, tool := range []string{"ip", "nft", "ethtool"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("%s is not installed (apt-get install iproute2 nftables ethtool): %v", tool, err)
		}
	}
	return nil
}

// New makes a lab: its namespaces, veths, addresses and offload settings,
// and an nftables table for DropIngress in each endpoint. On error it
// removes what it made.
func New(cfg Config) (_ *Lab, err error) {
	if err := Check(); err != nil {
		return nil, err
	}
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.MTU < 1280 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("netlab: MTU %d not in [1280, 65535]", cfg.MTU)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = "netlab"
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return nil, err
	}
	base := cfg.Prefix + "-" + hex.EncodeToString(suffix[:])
	l := &Lab{
		cfg:   cfg,
		A:     &Namespace{Name: base + "-a", Dev: devA, IPv4: addrA4, IPv6: addrA6, mac: macA},
		B:     &Namespace{Name: base + "-b", Dev: devB, IPv4: addrB4, IPv6: addrB6, mac: macB},
		procs: make(map[*Proc]bool),
	}
	if cfg.Relay && cfg.Router {
		return nil, errors.New("netlab: a lab has a relay or a router, not both")
	}
	if cfg.Relay || cfg.Router {
		l.M = &Namespace{Name: base + "-m", Dev: devMToA, Dev2: devMToB}
	}
	if cfg.Router {
		l.B.IPv4, l.B.IPv6 = routedB4, routedB6
	}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	for _, ns := range l.namespaces() {
		if err := run("ip", "netns", "add", ns.Name); err != nil {
			return nil, err
		}
		l.made = append(l.made, ns.Name)
		if err := run("ip", "-n", ns.Name, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	if l.M == nil {
		if err := run("ip", "-n", l.A.Name, "link", "add", devA, "type", "veth", "peer", "name", devB, "netns", l.B.Name); err != nil {
			return nil, err
		}
	} else {
		if err := run("ip", "-n", l.A.Name, "link", "add", devA, "type", "veth", "peer", "name", devMToA, "netns", l.M.Name); err != nil {
			return nil, err
		}
		if err := run("ip", "-n", l.B.Name, "link", "add", devB, "type", "veth", "peer", "name", devMToB, "netns", l.M.Name); err != nil {
			return nil, err
		}
	}
	mtu := strconv.Itoa(cfg.MTU)
	for _, ns := range []*Namespace{l.A, l.B} {
		peer := l.B
		if ns == l.B {
			peer = l.A
		}
		steps := [][]string{
			{"ip", "-n", ns.Name, "link", "set", ns.Dev, "address", ns.mac},
			{"ip", "-n", ns.Name, "addr", "add", ns.IPv4.String() + "/24", "dev", ns.Dev},
			{"ip", "-n", ns.Name, "addr", "add", ns.IPv6.String() + "/64", "dev", ns.Dev, "nodad"},
			{"ip", "-n", ns.Name, "link", "set", ns.Dev, "mtu", mtu},
			{"ip", "-n", ns.Name, "neigh", "replace", peer.IPv4.String(), "lladdr", peer.mac, "dev", ns.Dev, "nud", "permanent"},
			{"ip", "-n", ns.Name, "neigh", "replace", peer.IPv6.String(), "lladdr", peer.mac, "dev", ns.Dev, "nud", "permanent"},
		}
		if cfg.Router {
			// No static neighbours: the router answers ARP and
			// neighbour solicitations.
			steps = steps[:4]
		}
		for _, s := range steps {
			if err := run(s...); err != nil {
				return nil, err
			}
		}
		if err := l.setOffloads(ns, ns.Dev, l.M != nil); err != nil {
			return nil, err
		}
		if err := l.nftInit(ns); err != nil {
			return nil, err
		}
	}
	if cfg.Router {
		if err := l.makeRouter(mtu); err != nil {
			return nil, err
		}
	} else if l.M != nil {
		for _, dev := range []string{l.M.Dev, l.M.Dev2} {
			// No addresses at all in M, IPv6 link-local included: its
			// kernel answers nothing and sends nothing of its own.
			steps := [][]string{
				{"ip", "-n", l.M.Name, "link", "set", dev, "addrgenmode", "none"},
				{"ip", "-n", l.M.Name, "link", "set", dev, "mtu", mtu},
				{"ip", "-n", l.M.Name, "link", "set", dev, "promisc", "on"},
			}
			for _, s := range steps {
				if err := run(s...); err != nil {
					return nil, err
				}
			}
			if err := l.setOffloads(l.M, dev, true); err != nil {
				return nil, err
			}
			if err := run("ip", "-n", l.M.Name, "link", "set", dev, "up"); err != nil {
				return nil, err
			}
		}
	}
	for _, ns := range []*Namespace{l.A, l.B} {
		if err := run("ip", "-n", ns.Name, "link", "set", ns.Dev, "up"); err != nil {
			return nil, err
		}
		if cfg.Router {
			gw4, gw6 := routerA4, routerA6
			if ns == l.B {
				gw4, gw6 = routerB4, routerB6
			}
			if err := run("ip", "-n", ns.Name, "route", "add", "default", "via", gw4.String()); err != nil {
				return nil, err
			}
			if err := run("ip", "-n", ns.Name, "-6", "route", "add", "default", "via", gw6.String()); err != nil {
				return nil, err
			}
		}
	}
	return l, nil
}

// Addresses of a routed lab (Config.Router): B's, and M's on each side.
var (
	routedB4 = netip.MustParseAddr("10.77.1.2")
	routedB6 = netip.MustParseAddr("fd77:0:0:1::2")
	routerA4 = netip.MustParseAddr("10.77.0.254")
	routerA6 = netip.MustParseAddr("fd77::fe")
	routerB4 = netip.MustParseAddr("10.77.1.254")
	routerB6 = netip.MustParseAddr("fd77:0:0:1::fe")
)

// makeRouter configures M as a router between A's subnet and B's.
func (l *Lab) makeRouter(mtu string) error {
	steps := [][]string{
		{"ip", "netns", "exec", l.M.Name, "sysctl", "-qw", "net.ipv4.ip_forward=1"},
		{"ip", "netns", "exec", l.M.Name, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"},
		{"ip", "-n", l.M.Name, "addr", "add", routerA4.String() + "/24", "dev", l.M.Dev},
		{"ip", "-n", l.M.Name, "addr", "add", routerA6.String() + "/64", "dev", l.M.Dev, "nodad"},
		{"ip", "-n", l.M.Name, "addr", "add", routerB4.String() + "/24", "dev", l.M.Dev2},
		{"ip", "-n", l.M.Name, "addr", "add", routerB6.String() + "/64", "dev", l.M.Dev2, "nodad"},
	}
	for _, dev := range []string{l.M.Dev, l.M.Dev2} {
		steps = append(steps, []string{"ip", "-n", l.M.Name, "link", "set", dev, "mtu", mtu, "up"})
	}
	for _, s := range steps {
		if err := run(s...); err != nil {
			return err
		}
	}
	for _, dev := range []string{l.M.Dev, l.M.Dev2} {
		if err := l.setOffloads(l.M, dev, false); err != nil {
			return err
		}
	}
	return nil
}

// SetRouterMTU sets the MTU of M's routes to A's and B's subnets in a
// routed lab (Config.Router), as a narrower link beyond the router would:
// datagrams larger than it that M forwards are dropped, and M tells their
// senders with ICMP "fragmentation needed" or "packet too big". (Lowering
// the veths' own MTU instead would drop the larger frames silently on
// arrival, before M's IP layer sees them.)
func (l *Lab) SetRouterMTU(mtu int) error {
	if l.M == nil || !l.cfg.Router {
		return errors.New("netlab: the lab has no router (Config.Router)")
	}
	m := strconv.Itoa(mtu)
	for _, r := range [][]string{
		{"10.77.0.0/24", "dev", l.M.Dev}, {"10.77.1.0/24", "dev", l.M.Dev2},
		// The kernel's IPv6 routes of an address have metric 256.
		{"fd77::/64", "dev", l.M.Dev, "metric", "256"}, {"fd77:0:0:1::/64", "dev", l.M.Dev2, "metric", "256"},
	} {
		if err := run(append(append([]string{"ip", "-n", l.M.Name, "route", "change"}, r...), "mtu", m)...); err != nil {
			return err
		}
	}
	return nil
}

// MTU is the MTU of the lab's veths.
func (l *Lab) MTU() int { return l.cfg.MTU }

// namespaces lists the lab's namespaces: A, B and, with a relay, M.
func (l *Lab) namespaces() []*Namespace {
	if l.M != nil {
		return []*Namespace{l.A, l.B, l.M}
	}
	return []*Namespace{l.A, l.B}
}

// setOffloads turns off the offloads that let one skb stand for many
// frames, and with checksums also transmit checksum offload (for the
// relay, which forwards frames as they are and cannot finish a checksum
// left partial).
func (l *Lab) setOffloads(ns *Namespace, dev string, checksums bool) error {
	args := []string{"ip", "netns", "exec", ns.Name, "ethtool", "-K", dev,
		"tso", "off", "gso", "off", "gro", "off", "tx-udp-segmentation", "off"}
	if checksums {
		args = append(args, "tx", "off")
	}
	return run(args...)
}

// Close ends the processes the lab started that still run (SIGKILL, by
// PID) and waits for them, then deletes the lab's namespaces. It can be
// called more than once; it returns the first error.
func (l *Lab) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	procs := make([]*Proc, 0, len(l.procs))
	for p := range l.procs {
		procs = append(procs, p)
	}
	l.mu.Unlock()
	for _, p := range procs {
		p.Kill()
	}
	var first error
	for i := len(l.made) - 1; i >= 0; i-- {
		if err := run("ip", "netns", "del", l.made[i]); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Command returns a command that runs prog with args inside ns (by ip
// netns exec, which execs prog in its own process: the command's PID is
// prog's).
func (ns *Namespace) Command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "ip", append([]string{"netns", "exec", ns.Name, prog}, args...)...)
}

// Run runs prog with args inside ns and returns its combined output; the
// error includes that output.
func (ns *Namespace) Run(prog string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	out, err := ns.Command(ctx, prog, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("ip netns exec %s %s %s: %v: %s", ns.Name, prog, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return string(out), nil
}

// toolTimeout bounds one run of ip, nft or ethtool.
const toolTimeout = 30 * time.Second

// run runs a tool and returns an error that includes its output.
func run(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), toolTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
