//go:build dpdk

package dpdk

import "github.com/rsock-go/rsock/verbs/softroce/link"

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
}
