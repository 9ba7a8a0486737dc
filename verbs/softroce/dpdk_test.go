//go:build dpdk

package softroce

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
	"github.com/rsock-go/rsock/verbs/softroce/link/memif"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
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

// With the build tag dpdk, they also run between a DPDK link on a
// net_memif port (the memif server) and the pure-Go memif link (its
// client) over one memif connection. The pure-Go link does no ARP: the
// DPDK link has a static neighbour entry for it, and it sends to the DPDK
// port's MAC. MTU 9000: frame-sized buffers on both sides.
func init() { extraLinks = append(extraLinks, dpdkGoMemifLinks) }

var dpdkGoMemifLinks = linkKind{"dpdk-memif-gomemif", func(t testing.TB, _ pipe.Faults) (link.Link, link.Link) {
	n := dpdkPairs.Add(1)
	socket := filepath.Join(t.TempDir(), "memif.sock")
	goAddr := netip.MustParseAddrPort("192.0.2.2:4791")
	goMAC := wire.MAC{0x02, 0x72, 0x67, 0x6f, 0, byte(n)}
	a, err := dpdk.Open(dpdk.Config{
		Port:       fmt.Sprintf("net_memif%d,role=server,socket=%s,socket-abstract=no", n, socket),
		Local:      netip.MustParsePrefix("192.0.2.1/24"),
		MTU:        9000,
		Neighbours: map[netip.Addr]wire.MAC{goAddr.Addr(): goMAC},
	})
	if err != nil {
		t.Fatal(err)
	}
	b, err := memif.Dial(socket, "", memif.Config{Local: goAddr, LocalMAC: goMAC, PeerMAC: a.MAC(), BufferSize: dpdk.MaxFrameLen})
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	return a, b
}}
