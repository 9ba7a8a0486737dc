package dpdk

import (
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Environment variables that configure the link when a program opens it
// by name (link.Lookup("dpdk"), netconn's RSOCK_LINK=dpdk).
const (
	// EnvArgs holds the EAL arguments, vdevs included, separated by
	// spaces (DefaultEALArgs if unset). A --file-prefix unique to the
	// process is added unless one is given.
	EnvArgs = "RSOCK_DPDK_ARGS"
	// EnvPort names the port: a device name ("net_memif0", a PCI
	// address), or a vdev's devargs ("net_memif0,role=client,socket=...")
	// to hot-plug. The first port if unset.
	EnvPort = "RSOCK_DPDK_PORT"
	// EnvIP is the port's IP address and prefix length, e.g.
	// 192.0.2.1/24. Required.
	EnvIP = "RSOCK_DPDK_IP"
	// EnvGateway is the next hop for destinations outside the prefix.
	EnvGateway = "RSOCK_DPDK_GATEWAY"
	// EnvMTU sets the port's MTU; the port's own if unset.
	EnvMTU = "RSOCK_DPDK_MTU"
)

// DefaultEALArgs run DPDK without hugepages and without PCI devices, as
// on a machine without a DPDK-bound NIC.
var DefaultEALArgs = []string{"--no-huge", "-m", "1024", "--no-pci", "--no-telemetry"}

// Defaults for Config fields left zero.
const (
	DefaultRxDesc   = 1024
	DefaultTxDesc   = 1024
	DefaultMbufs    = 4095
	DefaultTxWait   = 100 * time.Millisecond
	DefaultLinkWait = 0
	// DefaultPoll is how long the receiver keeps polling after the last
	// frame before it sleeps: longer than a round trip between two
	// processes on one host, so that a conversation does not wait for a
	// sleep to end.
	DefaultPoll = 200 * time.Microsecond
	// MaxFrameLen is the longest frame received or sent: the mbufs' data
	// room.
	MaxFrameLen = 9216
)

// Config configures a link on a port.
type Config struct {
	// Port names the port: a device name, or a vdev's devargs to
	// hot-plug (see EnvPort). The first port if empty.
	Port string
	// Local is the port's IP address and prefix length. The link's
	// address is Local's IP, UDP port 4791.
	Local netip.Prefix
	// Gateway is the next hop for destinations outside Local's prefix;
	// without one they are unreachable.
	Gateway netip.Addr
	// Neighbours are static entries of the neighbour table, which
	// override ARP and neighbour discovery.
	Neighbours map[netip.Addr]wire.MAC
	// MAC is the Ethernet address the link uses; the port's if zero. A
	// port that filters on its own MAC receives nothing for another
	// (unless promiscuous).
	MAC wire.MAC
	// MTU sets the port's MTU if non-zero. On net_af_packet it is the
	// link's only: the interface keeps its own MTU, which must be at
	// least as large.
	MTU int
	// RxDesc, TxDesc and Mbufs size the queues and the mbuf pool.
	RxDesc, TxDesc, Mbufs int
	// TxWait is how long Send retries a full tx queue before dropping.
	TxWait time.Duration
	// LinkWait is how long Open waits for the port's link to come up (a
	// memif peer to connect); the link opens regardless. 0 by default:
	// frames sent while the link is down are lost and retransmitted.
	LinkWait time.Duration
	// NoInterrupts makes the receiver back off in sleeps even where the
	// driver has rx interrupts.
	NoInterrupts bool
	// Poll is how long the receiver keeps polling after the last frame
	// before it sleeps: DefaultPoll if zero, none if negative.
	Poll time.Duration
}

func (c *Config) withDefaults() (Config, error) {
	r := *c
	if !r.Local.IsValid() {
		return r, fmt.Errorf("dpdk: no local address (%s)", EnvIP)
	}
	if a := r.Local.Addr(); a.Is4In6() {
		r.Local = netip.PrefixFrom(a.Unmap(), max(r.Local.Bits()-96, 0))
	}
	if r.Gateway.IsValid() && (r.Gateway.Unmap().Is4() != r.Local.Addr().Is4() || !r.Local.Masked().Contains(r.Gateway.Unmap())) {
		return r, fmt.Errorf("dpdk: gateway %v is not in %v", r.Gateway, r.Local)
	}
	r.Gateway = r.Gateway.Unmap()
	if r.MTU < 0 || r.MTU > MaxFrameLen-wire.EthernetLen {
		return r, fmt.Errorf("dpdk: MTU %d not in [0, %d]", r.MTU, MaxFrameLen-wire.EthernetLen)
	}
	if r.RxDesc <= 0 {
		r.RxDesc = DefaultRxDesc
	}
	if r.TxDesc <= 0 {
		r.TxDesc = DefaultTxDesc
	}
	if r.Mbufs <= 0 {
		r.Mbufs = DefaultMbufs
	}
	if r.TxWait <= 0 {
		r.TxWait = DefaultTxWait
	}
	if r.Poll == 0 {
		r.Poll = DefaultPoll
	}
	if r.LinkWait == 0 {
		r.LinkWait = DefaultLinkWait
	}
	return r, nil
}

// ConfigFromEnv reads a Config from the environment (EnvPort, EnvIP,
// EnvGateway, EnvMTU).
func ConfigFromEnv() (Config, error) {
	c := Config{Port: os.Getenv(EnvPort)}
	ip := os.Getenv(EnvIP)
	if ip == "" {
		return c, fmt.Errorf("dpdk: %s is not set (the port's address and prefix, e.g. 192.0.2.1/24)", EnvIP)
	}
	var err error
	if c.Local, err = netip.ParsePrefix(ip); err != nil {
		return c, fmt.Errorf("dpdk: %s=%q: %w", EnvIP, ip, err)
	}
	if gw := os.Getenv(EnvGateway); gw != "" {
		if c.Gateway, err = netip.ParseAddr(gw); err != nil {
			return c, fmt.Errorf("dpdk: %s=%q: %w", EnvGateway, gw, err)
		}
	}
	if m := os.Getenv(EnvMTU); m != "" {
		if c.MTU, err = strconv.Atoi(m); err != nil {
			return c, fmt.Errorf("dpdk: %s=%q: %w", EnvMTU, m, err)
		}
	}
	return c, nil
}

// EALArgs returns the EAL arguments for the value of EnvArgs: the
// defaults if it is empty, and a --file-prefix unique to process pid
// unless one is given.
func EALArgs(env string, pid int) []string {
	args := strings.Fields(env)
	if len(args) == 0 {
		args = slices.Clone(DefaultEALArgs)
	}
	if !slices.ContainsFunc(args, func(a string) bool { return a == "--file-prefix" || strings.HasPrefix(a, "--file-prefix=") }) {
		args = append(args, "--file-prefix", fmt.Sprintf("rsock-%d", pid))
	}
	return args
}

// nextHop returns the neighbour that frames to dst go to, or false if
// dst is unreachable.
func nextHop(local netip.Prefix, gw, dst netip.Addr) (netip.Addr, bool) {
	dst = dst.Unmap()
	if dst.Is4() != local.Addr().Is4() {
		return netip.Addr{}, false
	}
	if local.Masked().Contains(dst) {
		return dst, true
	}
	return gw, gw.IsValid()
}

// Devargs keys the link adds for frames above 1500 bytes.
const (
	// memifBufferArg is net_memif's descriptor buffer size.
	memifBufferArg = "bsize="
	// afPacketFrameArg and afPacketBlockArg are net_af_packet's ring
	// frame and block sizes.
	afPacketFrameArg = "framesz="
	afPacketBlockArg = "blocksz="
)

// afPacketFrameRoom is what a net_af_packet ring frame holds besides the
// Ethernet frame: the kernel's tpacket header and alignment.
const afPacketFrameRoom = 128

// portDevargs returns the devargs to hot-plug for spec at MTU mtu. Above
// 1500 bytes a net_memif vdev gets descriptor buffers of a whole frame
// (bsize), since DPDK 22.11 loses frames it chains over several
// descriptors, and a net_af_packet vdev ring frames that hold one
// (framesz and blocksz: the next power of two), since it truncates or
// drops longer ones; unless spec sets them.
func portDevargs(spec string, mtu int) string {
	name, args, _ := strings.Cut(spec, ",")
	given := func(key string) bool {
		return slices.ContainsFunc(strings.Split(args, ","), func(a string) bool { return strings.HasPrefix(a, key) })
	}
	switch {
	case mtu <= 1500:
	case strings.HasPrefix(name, "net_memif") && !given(memifBufferArg):
		return spec + "," + memifBufferArg + strconv.Itoa(MaxFrameLen)
	case strings.HasPrefix(name, "net_af_packet") && !given(afPacketFrameArg) && !given(afPacketBlockArg):
		frame := 2048
		for frame < wire.EthernetLen+mtu+afPacketFrameRoom {
			frame *= 2
		}
		return spec + "," + afPacketFrameArg + strconv.Itoa(frame) + "," + afPacketBlockArg + strconv.Itoa(frame)
	}
	return spec
}
