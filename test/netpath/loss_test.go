//go:build linux

package netpath

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/netlab"
)

// lossRates are the random loss rates, per mille: 0.1%, 1%, 5%, 20%.
var lossRates = []int{1, 10, 50, 200}

// lossCases are the cases of TestLoss: every rate one way and both ways
// at MTU 9000 over IPv4, and 1% and 20% both ways at MTU 1500 over IPv6;
// with -netpath.soak every rate and direction on every MTU and family.
func lossCases() []netlab.GoodputCase {
	var cases []netlab.GoodputCase
	for _, mtu := range []int{9000, 1500} {
		for _, ipv6 := range []bool{false, true} {
			for _, pm := range lossRates {
				for _, both := range []bool{false, true} {
					c := netlab.GoodputCase{MTU: mtu, LossPerMille: pm, BothWays: both, IPv6: ipv6}
					if *soak || (mtu == 9000 && !ipv6) || (mtu == 1500 && ipv6 && (pm == 10 || pm == 200) && both) {
						cases = append(cases, c)
					}
				}
			}
		}
	}
	return cases
}

// lossBytes is what each transport moves in a loss case: 256 MiB with
// -netpath.soak; else 16 MiB, and 4 MiB at 20% loss, where TCP's goodput
// on this path falls to about a megabyte per second (retransmission
// timeouts).
func lossBytes(c netlab.GoodputCase) int64 {
	switch {
	case *soak:
		return 256 << 20
	case c.LossPerMille >= 200:
		return 4 << 20
	}
	return 16 << 20
}

// TestLoss moves a verified stream from A to B with rsockbench under
// random loss (nftables, at B's ingress, or at both ends' for both ways),
// TCP and then rsock in the same lab, and logs the goodput table with
// rsock's retransmission and NAK counters. A case fails when rsock does
// not deliver every byte, verified, over RDMA, within its hang limit, or
// when TCP fails (its data corrupt or its connection broken: the path
// itself is then wrong). TCP taking longer than the limit is logged, not
// failed: it is the baseline, not what is tested. Goodput is never
// asserted (speed lives in benchmarks): the README's goodput table comes
// from scripts/netpath-bench.sh, which runs the same cases longer.
func TestLoss(t *testing.T) {
	skipUnlessLab(t)
	_, rsockbench := build(t)
	cases := lossCases()
	rows := make([]netlab.GoodputRow, len(cases))
	t.Run("cases", func(t *testing.T) {
		for i, c := range cases {
			t.Run(c.String(), func(t *testing.T) {
				t.Parallel()
				n := lossBytes(c)
				// The hang limit allows a goodput of a quarter megabyte per
				// second, and at least a minute.
				limit := max(time.Minute, time.Duration(n/250e3)*time.Second)
				rows[i] = netlab.MeasureGoodput(context.Background(), netlab.GoodputConfig{
					Rsockbench: rsockbench, Bytes: n, Timeout: limit, Prefix: "netpath"}, c)
				row := &rows[i]
				t.Logf("%d bytes each; rsock counters: %s", n, formatCounters(row.Counters))
				if row.Err != "" {
					t.Error(row.Err)
				}
				for _, w := range []string{row.TCP.Warning, row.Rsock.Warning} {
					if w != "" {
						t.Logf("warning: %s", w)
					}
				}
				if row.TCP.TimedOut {
					t.Logf("tcp did not finish within %v (not a failure: TCP is the baseline)", limit)
				} else {
					checkRun(t, "tcp", &row.TCP, uint64(n))
				}
				checkRun(t, "rsock", &row.Rsock, uint64(n))
				checkLossApplied(t, "B", c.LossPerMille, row.Frames[1], row.Dropped[1])
				if c.BothWays {
					checkLossApplied(t, "A", c.LossPerMille, row.Frames[0], row.Dropped[0])
				}
			})
		}
	})
	logRows(t, rows...)
}

// checkLossApplied checks that an end's loss rule dropped about perMille
// of the frames that arrived there: within six standard deviations (and
// 3 frames) of the binomial mean, and, when 20 or more drops are
// expected, some.
func checkLossApplied(t *testing.T, end string, perMille int, frames, dropped uint64) {
	t.Helper()
	p := float64(perMille) / 1000
	mean := float64(frames) * p
	slack := 6*math.Sqrt(mean*(1-p)) + 3
	t.Logf("%s dropped %d of %d frames (%.2f%%, set %.1f%%)", end, dropped, frames, 100*float64(dropped)/float64(max(frames, 1)), 100*p)
	if math.Abs(float64(dropped)-mean) > slack || (mean >= 20 && dropped == 0) {
		t.Errorf("%s: the loss rule dropped %d of %d frames, want about %.0f (%.1f%%)", end, dropped, frames, mean, 100*p)
	}
}
