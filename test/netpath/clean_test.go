//go:build linux

package netpath

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/netlab"
)

// cleanBytes is what each clean-path case moves each way.
const cleanBytes = 256 << 20

// cleanPaths are the MTUs and families of the clean-path cases.
var cleanPaths = []struct {
	mtu  int
	ipv6 bool
}{{1500, false}, {1500, true}, {9000, false}, {9000, true}}

// TestCleanPathNetconn moves 256 MiB each way at once over one netconn
// connection between two namespaces, and checks both directions byte for
// byte (SHA-256 of what was sent against what was received) and that the
// connection ran on RDMA.
func TestCleanPathNetconn(t *testing.T) {
	skipUnlessLab(t)
	bin, _ := build(t)
	for i, p := range cleanPaths {
		t.Run(fmt.Sprintf("mtu%d/%s", p.mtu, family(p.ipv6)), func(t *testing.T) {
			t.Parallel()
			lab := newLab(t, netlab.Config{MTU: p.mtu})
			runExchange(t, lab, bin, netlab.ExchangeOptions{Bytes: cleanBytes, Seed: uint64(100 + i), IPv6: p.ipv6})
		})
	}
}

// TestCleanPathRsockbench runs rsockbench client -verify -bytes 256MiB
// against rsockbench server -verify between two namespaces, each way (a
// client in A and a server in B, then the reverse), over rsock and (for
// comparison, in the same run) over TCP: the server checks every byte of
// each.
func TestCleanPathRsockbench(t *testing.T) {
	skipUnlessLab(t)
	_, rsockbench := build(t)
	for _, p := range cleanPaths {
		for _, fromB := range []bool{false, true} {
			c := netlab.GoodputCase{MTU: p.mtu, IPv6: p.ipv6, FromB: fromB}
			testCleanPathRsockbench(t, rsockbench, c)
		}
	}
}

func testCleanPathRsockbench(t *testing.T, rsockbench string, c netlab.GoodputCase) {
	direction := "a-to-b"
	if c.FromB {
		direction = "b-to-a"
	}
	t.Run(fmt.Sprintf("mtu%d/%s/%s", c.MTU, family(c.IPv6), direction), func(t *testing.T) {
		t.Parallel()
		// rsockbench reports no progress, so a hang shows only at the
		// limit: 2 minutes, over 50 times a working run's time.
		row := netlab.MeasureGoodput(context.Background(), netlab.GoodputConfig{
			Rsockbench: rsockbench, Bytes: cleanBytes, Timeout: 2 * time.Minute, Prefix: "netpath"}, c)
		logRows(t, row)
		checkRun(t, "tcp", &row.TCP, cleanBytes)
		checkRun(t, "rsock", &row.Rsock, cleanBytes)
		if row.Err != "" {
			t.Error(row.Err)
		}
	})
}

// checkRun checks that an rsockbench run completed with n bytes verified,
// rsock's on RDMA.
func checkRun(t *testing.T, transport string, r *netlab.TransportRun, n uint64) {
	t.Helper()
	if !r.OK() {
		t.Errorf("%s: %s", transport, r.Err)
		return
	}
	if r.Bytes != n || r.VerifiedBytes != n {
		t.Errorf("%s: the server received %d bytes and verified %d, want %d", transport, r.Bytes, r.VerifiedBytes, n)
	}
	if transport == "rsock" && !strings.HasPrefix(r.ConnTransport, "rdma/") {
		t.Errorf("rsock ran on %q, not RDMA (fallback reason: %q)", r.ConnTransport, r.FallbackReason)
	}
}

// logRows logs rows as the goodput table.
func logRows(t *testing.T, rows ...netlab.GoodputRow) {
	t.Helper()
	var b strings.Builder
	netlab.WriteGoodputTable(&b, rows)
	t.Logf("\n%s", b.String())
}
