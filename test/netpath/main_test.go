//go:build linux

package netpath

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/verbs"
)

var soak = flag.Bool("netpath.soak", false, "run the long cases: 256 MiB in every case, on every MTU and address family")

// binaries are the programs the tests run inside the namespaces, built
// once per run (without the race detector: they carry the traffic).
var binaries struct {
	once       sync.Once
	dir        string
	netlab     string // internal/netlab/cmd/netlab
	rsockbench string // cmd/rsockbench
	err        error
}

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.Cleanup(func(int) {
		if binaries.dir != "" {
			os.RemoveAll(binaries.dir)
		}
	}))
}

// build returns the paths of the netlab and rsockbench binaries.
func build(t *testing.T) (netlabBin, rsockbenchBin string) {
	t.Helper()
	binaries.once.Do(func() {
		goTool, err := exec.LookPath("go")
		if err != nil {
			binaries.err = fmt.Errorf("no go tool to build the programs: %v", err)
			return
		}
		if binaries.dir, err = os.MkdirTemp("", "netpath-bin-"); err != nil {
			binaries.err = err
			return
		}
		binaries.netlab = filepath.Join(binaries.dir, "netlab")
		binaries.rsockbench = filepath.Join(binaries.dir, "rsockbench")
		for _, b := range []struct{ out, pkg string }{
			{binaries.netlab, "github.com/rsock-go/rsock/internal/netlab/cmd/netlab"},
			{binaries.rsockbench, "github.com/rsock-go/rsock/cmd/rsockbench"},
		} {
			if out, err := exec.Command(goTool, "build", "-o", b.out, b.pkg).CombinedOutput(); err != nil {
				binaries.err = fmt.Errorf("go build %s: %v\n%s", b.pkg, err, out)
				return
			}
		}
	})
	if binaries.err != nil {
		t.Fatal(binaries.err)
	}
	return binaries.netlab, binaries.rsockbench
}

// newLab makes a lab that t's cleanup removes, or skips t when no lab can
// be made here (not root, tools missing).
func newLab(t *testing.T, cfg netlab.Config) *netlab.Lab {
	t.Helper()
	if err := netlab.Check(); err != nil {
		t.Skip(err)
	}
	lab, err := netlab.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := lab.Close(); err != nil {
			t.Errorf("removing the lab: %v", err)
		}
	})
	return lab
}

// skipUnlessLab skips t when no lab can be made here.
func skipUnlessLab(t *testing.T) {
	t.Helper()
	if err := netlab.Check(); err != nil {
		t.Skip(err)
	}
}

// family names an address family in test names.
func family(ipv6 bool) string {
	if ipv6 {
		return "ipv6"
	}
	return "ipv4"
}

// hangLimit is how long a transfer of n bytes may take before the test
// gives up on it: a minute plus 1 s per MB, far beyond any working run.
func hangLimit(n int64) time.Duration {
	return time.Minute + time.Duration(n/1e6)*time.Second
}

// runExchange runs an exchange of o.Bytes each way between A and B and
// checks it: both sides complete on RDMA, each received exactly what the
// other sent (SHA-256 and pattern). It returns the results, listener's
// first.
func runExchange(t *testing.T, lab *netlab.Lab, bin string, o netlab.ExchangeOptions) (lres, dres *netlab.ExchangeResult) {
	t.Helper()
	lp, dp, err := lab.StartExchange(bin, o)
	if err != nil {
		t.Fatal(err)
	}
	return waitExchange(t, lp, dp, o.Bytes)
}

// waitExchange waits for both sides' results and checks them.
func waitExchange(t *testing.T, lp, dp *netlab.Proc, n int64) (lres, dres *netlab.ExchangeResult) {
	t.Helper()
	var results [2]*netlab.ExchangeResult
	for i, p := range []*netlab.Proc{lp, dp} {
		ev, err := netlab.WaitEvent(p, hangLimit(n), netlab.IsEvent(netlab.EventResult))
		if err != nil {
			t.Fatalf("%s side: %v", []string{"listener", "dialer"}[i], err)
		}
		results[i] = ev.Result
	}
	lres, dres = results[0], results[1]
	for i, r := range results {
		side := []string{"listener (B)", "dialer (A)"}[i]
		t.Logf("%s: %s, sent %d, received %d in %.2fs; counters %s", side, r.Transport, r.Sent, r.Received, r.Seconds, formatCounters(r.Counters))
		if r.Error != "" {
			t.Errorf("%s failed: %s", side, r.Error)
		}
		if !strings.HasPrefix(r.Transport, "rdma/") {
			t.Errorf("%s ran on %q, not RDMA (fallback reason: %q)", side, r.Transport, r.FallbackReason)
		}
		if r.Sent != n || r.Received != n {
			t.Errorf("%s sent %d and received %d bytes, want %d each way", side, r.Sent, r.Received, n)
		}
		if r.MismatchAt >= 0 {
			t.Errorf("%s: received stream differs from the peer's pattern at offset %d", side, r.MismatchAt)
		}
	}
	if dres.SentSHA256 != lres.ReceivedSHA256 {
		t.Errorf("A to B: sent SHA-256 %s, B received %s", dres.SentSHA256, lres.ReceivedSHA256)
	}
	if lres.SentSHA256 != dres.ReceivedSHA256 {
		t.Errorf("B to A: sent SHA-256 %s, A received %s", lres.SentSHA256, dres.ReceivedSHA256)
	}
	return lres, dres
}

// formatCounters lists the counters that tell how a path went.
func formatCounters(c verbs.Counters) string {
	return fmt.Sprintf("packets %d sent %d received, retransmits %d, timeouts %d, seq NAKs %d sent %d received, "+
		"duplicates %d, out of order %d, send errors %d, retry exceeded %d",
		c.SentPackets, c.RecvPackets, c.Retransmits, c.Timeouts, c.SeqNAKsSent, c.SeqNAKsRecv,
		c.Duplicates, c.OutOfOrder, c.SendErrors, c.RetryExceeded)
}
