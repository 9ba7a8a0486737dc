//go:build dpdk

package softroce

import (
	"fmt"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// With the build tag dpdk, the tests over every kind of link also run
// over two DPDK links joined by a net_ring pair in this process.
func init() { extraLinks = append(extraLinks, dpdkRingLinks) }

var dpdkPairs atomic.Int32

var dpdkRingLinks = linkKind{"dpdk-ring", func(t testing.TB, _ pipe.Faults) (link.Link, link.Link) {
	n := dpdkPairs.Add(1)
	a, b, err := dpdk.OpenRingPair(fmt.Sprintf("ops_a%d", n), fmt.Sprintf("ops_b%d", n),
		dpdk.Config{Local: netip.MustParsePrefix("192.0.2.1/24"), MTU: 9000},
		dpdk.Config{Local: netip.MustParsePrefix("192.0.2.2/24"), MTU: 9000})
	if err != nil {
		t.Fatal(err)
	}
	return a, b
}}

// The DPDK environment is held for the whole test binary (it starts once
// per process), from TestMain.
func init() {
	holdEnv = func() func() {
		if os.Getenv(dpdk.EnvArgs) == "" {
			os.Setenv(dpdk.EnvArgs, "--no-huge -m 512 --no-pci --no-telemetry --log-level=lib.eal:warning")
		}
		release, err := dpdk.Hold()
		if err != nil {
			panic(err)
		}
		return release
	}
}
