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

// Link names: which link carries a connection's packets.
const (
	// LinkAuto picks, per connection, a link faster than TCP on its path
	// (see ChoosePlan): shm on one host (then memif), an rdma-core
	// device's port, else TCP; with provider softroce, udp between hosts.
	LinkAuto = "auto"
	// LinkUDP uses a kernel UDP socket (soft-RoCE over the kernel's UDP):
	// it reaches RNICs and rxe, and is slower than TCP.
	LinkUDP = "udp"
	// LinkMemif uses shared-memory memif rings between the two processes
	// of one host, and falls back to TCP (not udp) when memif cannot be
	// set up.
	LinkMemif = "memif"
)

// Environment variables read when the config leaves a knob empty.
const (
	EnvProvider = "RSOCK_PROVIDER"
	// EnvLink is the link setting, RSOCK_LINK, of netconn and of
	// rsockbench's modes.
	EnvLink     = "RSOCK_LINK"
	EnvRingSize = "RSOCK_RING_SIZE"
	// EnvMemifWire names an external memif server socket (a virtual wire
	// such as dpdk-testpmd or VPP) that the process connects to as memif
	// client and shares among its connections, instead of a memif link
	// per connection; EnvMemifSecret is the secret it expects.
	EnvMemifWire   = "RSOCK_MEMIF_WIRE"
	EnvMemifSecret = "RSOCK_MEMIF_SECRET"
	// EnvECN, RSOCK_ECN=on (or 1), offers ECN (rsock.Config.ECN) where
	// both peers run congestion control. Unset, off or 0 leave it off;
	// another value is an error.
	EnvECN = "RSOCK_ECN"
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

// Settings returns the provider and link that a Dialer or ListenConfig
// with these fields runs with: empty fields from the environment
// (RSOCK_PROVIDER, RSOCK_LINK), else auto; an error for a name this
// binary does not know.
func Settings(provider, link string) (resolvedProvider, resolvedLink string, err error) {
	set, err := resolve(provider, link, rsock.Config{})
	return set.provider, set.link, err
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
	case ProviderAuto, ProviderShm, ProviderSoftRoCE, ProviderRDMACore, ProviderTCP:
	default:
		return settings{}, fmt.Errorf("netconn: unknown provider %q (want auto, shm, softroce, rdmacore or tcp)", provider)
	}
	if link == "" {
		link = os.Getenv(EnvLink)
	}
	if link == "" {
		link = LinkAuto
	}
	if err := checkLink(link); err != nil {
		return settings{}, err
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
	switch v := os.Getenv(EnvECN); v {
	case "", "off", "0":
	case "on", "1":
		stream.ECN = true
	default:
		return settings{}, fmt.Errorf("netconn: %s=%q: want on or off", EnvECN, v)
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
