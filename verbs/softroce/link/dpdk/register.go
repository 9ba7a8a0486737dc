//go:build dpdk

package dpdk

import (
	"net/netip"
	"os"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// Registered under "dpdk", configured from the environment (EnvArgs,
// EnvPort, EnvIP, EnvGateway, EnvMTU).
func init() {
	link.Register("dpdk", func(link.OpenConfig) (link.Link, error) {
		c, err := ConfigFromEnv()
		if err != nil {
			return nil, err
		}
		return Open(c)
	})
	// The port's address is configured here, not in the kernel: peers on
	// its prefix are reached through the port.
	link.RegisterNetwork("dpdk", func() (netip.Prefix, bool) {
		p, err := netip.ParsePrefix(os.Getenv(EnvIP))
		return p.Masked(), err == nil
	})
}
