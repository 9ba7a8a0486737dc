//go:build linux

package netpath

import (
	"fmt"
	"testing"

	"github.com/rsock-go/rsock/internal/netlab"
)

// impairBytes is what each way of an impaired-path exchange moves.
func impairBytes() int64 {
	if *soak {
		return 256 << 20
	}
	return 32 << 20
}

// impairPaths are the MTUs and families of the duplication and reordering
// cases: MTU 9000 over IPv4 and 1500 over IPv6, and with -netpath.soak all
// four.
func impairPaths() []struct {
	mtu  int
	ipv6 bool
} {
	if *soak {
		return cleanPaths
	}
	return []struct {
		mtu  int
		ipv6 bool
	}{{9000, false}, {1500, true}}
}

// TestImpairedPath runs a two-way netconn exchange through the lab's
// impairment relay, with 1% of the frames of each direction duplicated, or
// 5% reordered (each held back until 3 later frames have passed it), and
// checks every byte (SHA-256) and that the connection ran on RDMA. The
// relay's counts prove the impairment happened: a case fails if the relay
// duplicated or reordered nothing in either direction.
func TestImpairedPath(t *testing.T) {
	skipUnlessLab(t)
	bin, _ := build(t)
	impairments := []struct {
		name string
		imp  netlab.Impairment
	}{
		{"duplicate1pct", netlab.Impairment{Duplicate: 0.01}},
		{"reorder5pct", netlab.Impairment{Reorder: 0.05, ReorderDepth: 3}},
	}
	for i, p := range impairPaths() {
		for j, im := range impairments {
			t.Run(fmt.Sprintf("%s/mtu%d/%s", im.name, p.mtu, family(p.ipv6)), func(t *testing.T) {
				t.Parallel()
				lab := newLab(t, netlab.Config{MTU: p.mtu, Relay: true})
				imp := im.imp
				imp.Seed = uint64(10*i + j + 1)
				relay, err := lab.StartRelay(bin, imp)
				if err != nil {
					t.Fatal(err)
				}
				n := impairBytes()
				lp, dp, err := lab.StartExchange(bin, netlab.ExchangeOptions{Bytes: n, Seed: uint64(200 + 10*i + j), IPv6: p.ipv6})
				if err != nil {
					t.Fatal(err)
				}
				waitExchange(t, lp, dp, n)
				rep, err := netlab.StopRelay(relay)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("relay A to B: %+v", rep.AToB)
				t.Logf("relay B to A: %+v", rep.BToA)
				for dir, s := range map[string]netlab.RelayStats{"A to B": rep.AToB, "B to A": rep.BToA} {
					if s.Frames == 0 {
						t.Errorf("relay %s: no frame went through the relay", dir)
					}
					if imp.Duplicate > 0 && s.Duplicated == 0 {
						t.Errorf("relay %s: duplicated none of %d frames", dir, s.Frames)
					}
					if imp.Reorder > 0 && s.Reordered == 0 {
						t.Errorf("relay %s: reordered none of %d frames", dir, s.Frames)
					}
				}
			})
		}
	}
}
