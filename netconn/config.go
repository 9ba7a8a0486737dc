package netconn

import (
	"fmt"
	"os"
	"strconv"

	"github.com/rsock-go/rsock/ring"
	"github.com/rsock-go/rsock/rsock"
)

// Provider names.
const (
	ProviderAuto     = "auto"
	ProviderSoftRoCE = "softroce"
	ProviderRDMACore = "rdmacore"
	ProviderTCP      = "tcp"
)

// Link names: which soft-RoCE link carries a connection's packets.
const (
	// LinkAuto uses memif when both ends are on the same host and udp
	// otherwise; the handshake says which.
	LinkAuto = "auto"
	// LinkUDP uses a kernel UDP socket.
	LinkUDP = "udp"
	// LinkMemif uses shared-memory memif rings between the two processes,
	// and falls back to TCP (not udp) when memif cannot be set up.
	LinkMemif = "memif"
)

// Environment variables read when the config leaves a knob empty.
const (
	EnvProvider = "RSOCK_PROVIDER"
	EnvLink     = "RSOCK_LINK"
	EnvRingSize = "RSOCK_RING_SIZE"
	// EnvMemifWire names an external memif server socket (a virtual wire
	// such as dpdk-testpmd or VPP) that the process connects to as memif
	// client and shares among its connections, instead of a memif link
	// per connection; EnvMemifSecret is the secret it expects.
	EnvMemifWire   = "RSOCK_MEMIF_WIRE"
	EnvMemifSecret = "RSOCK_MEMIF_SECRET"
)

// settings is the resolved choice of provider, link and stream sizing.
type settings struct {
	provider string
	link     string
	stream   rsock.Config
	// wire is the external memif server that the shared devices connect
	// to ($RSOCK_MEMIF_WIRE), or "".
	wire string
}

// resolve fills empty knobs from the environment and checks them.
func resolve(provider, link string, stream rsock.Config) (settings, error) {
	if provider == "" {
		provider = os.Getenv(EnvProvider)
	}
	if provider == "" {
		provider = ProviderAuto
	}
	switch provider {
	case ProviderAuto, ProviderSoftRoCE, ProviderRDMACore, ProviderTCP:
	default:
		return settings{}, fmt.Errorf("netconn: unknown provider %q (want auto, softroce, rdmacore or tcp)", provider)
	}
	if link == "" {
		link = os.Getenv(EnvLink)
	}
	if link == "" {
		link = LinkAuto
	}
	switch link {
	case LinkAuto, LinkUDP, LinkMemif:
	default:
		if err := checkRegistered(link); err != nil {
			return settings{}, err
		}
	}
	if stream.RingSize == 0 {
		if v := os.Getenv(EnvRingSize); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return settings{}, fmt.Errorf("netconn: %s=%q: %w", EnvRingSize, v, err)
			}
			stream.RingSize = n
		}
	}
	if stream.RingSize != 0 {
		if err := ring.CheckSize(stream.RingSize); err != nil {
			return settings{}, fmt.Errorf("netconn: %w", err)
		}
	}
	set := settings{provider: provider, link: link, stream: stream}
	if set.wire = os.Getenv(EnvMemifWire); set.wire != "" {
		if link == LinkUDP {
			return settings{}, fmt.Errorf("netconn: %s is set, and the link is udp", EnvMemifWire)
		}
	}
	return set, nil
}

// rdma reports whether RDMA is to be tried at all.
func (s settings) rdma() bool { return s.provider != ProviderTCP }

// memif reports whether a same-host connection should try memif: a
// soft-RoCE link choice other than udp.
func (s settings) memif() bool {
	return s.wire == "" && (s.link == LinkAuto || s.link == LinkMemif) && (s.provider == ProviderAuto || s.provider == ProviderSoftRoCE)
}

// sharedLink names the link of the devices connections share: udp, a
// registered link (dpdk), or the external memif wire.
func (s settings) sharedLink() string {
	if registered(s.link) {
		return s.link
	}
	if s.wire != "" {
		return linkWirePrefix + s.wire
	}
	return LinkUDP
}

// linkWirePrefix starts the registry's link name of a device on an
// external memif wire; the socket path follows.
const linkWirePrefix = "memif-wire:"
