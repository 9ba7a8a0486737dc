//go:build linux

package netpath

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/rlimit"

	"github.com/rsock-go/rsock/internal/ecnmark"
	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/netconn"
)

// ecnRate and ecnQueue are the bottleneck of TestECNBottleneck: a tbf
// on the router's egress toward B at 100 Mbit/s holding 20 ms, with the
// CE marker (internal/ecnmark) in front of it at the same rate, marking
// over 1 ms and knowing the bucket's 64 KiB burst.
const (
	ecnRate      = "100mbit"
	ecnQueue     = "20ms"
	ecnThreshold = time.Millisecond
	ecnBytes     = 32 << 20
)

// TestECNBottleneck moves a verified 32 MiB each way between A and B
// over rsock on the udp link, through a router whose egress toward B is
// a 100 Mbit/s token bucket with a 20 ms queue, a virtual queue in front
// of it marking CE over 1 ms. With ECN negotiated, the marker must mark
// A's packets, B must see and echo the marks, A must hear them, and once
// the flow has started (B received the first quarter) the bucket must
// drop (almost) nothing. (The start may still overflow it: the first
// windows of a slow start toward a 100 µs round trip fill the 20 ms queue
// within 15 ms, before the first marks come back; measured: 0 to 330
// drops, all in the first 250 ms.) Both ends offer ECN (RSOCK_ECN=on; it
// is off by default). With ECN off at B (not negotiated), no packet may cross the router
// ECN-capable, so nothing is marked or echoed. Both ways the bytes must
// arrive intact, on RDMA.
func TestECNBottleneck(t *testing.T) {
	skipUnlessLab(t)
	bin, _ := build(t)
	for i, c := range []struct {
		name string
		ecn  bool
	}{{"negotiated", true}, {"off-at-B", false}} {
		t.Run(c.name, func(t *testing.T) {
			lab := newLab(t, netlab.Config{Router: true})
			m := attachMarker(t, lab)
			if out, err := lab.M.Run("tc", "qdisc", "replace", "dev", lab.M.Dev2, "root", "tbf",
				"rate", ecnRate, "burst", "64kb", "latency", ecnQueue); err != nil {
				t.Fatalf("tbf: %v %s", err, out)
			}
			on := []string{netconn.EnvECN + "=on"}
			envB := on
			if !c.ecn {
				envB = []string{netconn.EnvECN + "=off"}
			}
			lp, dp := startExchangeEnv(t, lab, bin, on, envB, netlab.ExchangeOptions{Bytes: ecnBytes, Seed: uint64(200 + i), Port: 18750,
				ProgressEvery: ecnBytes / 4})
			// B's first progress event: a quarter of A's stream is through
			// the bottleneck, and the start is over.
			if _, err := netlab.WaitEvent(lp, hangLimit(ecnBytes), netlab.IsEvent(netlab.EventProgress)); err != nil {
				t.Fatal(err)
			}
			startDrops, _ := tbfCounts(t, lab)
			lres, dres := waitExchange(t, lp, dp, ecnBytes)
			mc, err := m.Counts()
			if err != nil {
				t.Fatal(err)
			}
			drops, sent := tbfCounts(t, lab)
			b, a := lres.Counters, dres.Counters
			t.Logf("marker: %d packets, %d ECN-capable, %d marked; tbf: %d sent, %d dropped (%d of them in the first quarter)",
				mc.Packets, mc.ECT, mc.Marked, sent, drops, startDrops)
			t.Logf("B: %d ECN-capable received, %d CE, %d echoes sent; A: %d echoes received, %d marks echoed, %d congestion events",
				b.ECNCapableRecv, b.ECNCERecv, b.ECNEchoesSent, a.ECNEchoesRecv, a.ECNMarksEchoed, a.CongestionEvents)
			if mc.Packets == 0 || sent == 0 {
				t.Fatalf("the marker saw %d packets and tbf sent %d: the bottleneck carried nothing", mc.Packets, sent)
			}
			if !c.ecn {
				if mc.ECT != 0 || mc.Marked != 0 || b.ECNCapableRecv != 0 || a.ECNCapableRecv != 0 || a.ECNEchoesRecv != 0 {
					t.Errorf("ECN not negotiated, yet %d ECN-capable packets crossed the router (%d marked), B and A received %d and %d, A %d echoes",
						mc.ECT, mc.Marked, b.ECNCapableRecv, a.ECNCapableRecv, a.ECNEchoesRecv)
				}
				return
			}
			if mc.Marked == 0 || b.ECNCERecv == 0 || b.ECNEchoesSent == 0 || a.ECNEchoesRecv == 0 || a.ECNMarksEchoed == 0 {
				t.Errorf("marks: %d set at the router, %d seen by B, %d echoes sent by B, %d received by A reporting %d marks; want all > 0",
					mc.Marked, b.ECNCERecv, b.ECNEchoesSent, a.ECNEchoesRecv, a.ECNMarksEchoed)
			}
			if b.ECNCERecv > mc.Marked || a.ECNMarksEchoed > b.ECNCERecv {
				t.Errorf("more marks seen (%d) than set (%d), or echoed (%d) than seen", b.ECNCERecv, mc.Marked, a.ECNMarksEchoed)
			}
			if limit := max(5, sent/1000); drops-startDrops > limit {
				t.Errorf("after the start, the bottleneck dropped %d of %d packets with ECN, want at most %d", drops-startDrops, sent+drops, limit)
			}
		})
	}
}

// attachMarker loads the CE marker and attaches it to the egress of the
// router's device toward B, for the test's lifetime; it skips t where
// this kernel cannot run it.
func attachMarker(t *testing.T, lab *netlab.Lab) *ecnmark.Marker {
	t.Helper()
	if err := rlimit.RemoveMemlock(); err != nil {
		t.Skipf("cannot lift the memlock limit for BPF: %v", err)
	}
	rate, err := ecnmark.ParseRate(ecnRate)
	if err != nil {
		t.Fatal(err)
	}
	m, err := ecnmark.New(ecnmark.Config{Rate: rate, Threshold: ecnThreshold, Limit: 20 * time.Millisecond, Burst: 64 << 10})
	if errors.Is(err, ebpf.ErrNotSupported) || errors.Is(err, os.ErrPermission) {
		t.Skipf("this kernel cannot load the CE marker: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	a, err := m.Attach(lab.M.Name, lab.M.Dev2)
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("this kernel has no tcx: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return m
}

// tbfCounts reads the drops and sent packets of the tbf on the router's
// device toward B.
func tbfCounts(t *testing.T, lab *netlab.Lab) (drops, sent uint64) {
	t.Helper()
	out, err := lab.M.Run("tc", "-s", "-j", "qdisc", "show", "dev", lab.M.Dev2)
	if err != nil {
		t.Fatal(err)
	}
	var qs []struct {
		Kind    string `json:"kind"`
		Drops   uint64 `json:"drops"`
		Packets uint64 `json:"packets"`
	}
	if err := json.Unmarshal([]byte(out), &qs); err != nil {
		t.Fatalf("tc -j: %v: %s", err, out)
	}
	for _, q := range qs {
		if q.Kind == "tbf" {
			return q.Drops, q.Packets
		}
	}
	t.Fatalf("no tbf on %s: %s", lab.M.Dev2, out)
	return 0, 0
}

// startExchangeEnv is netlab's StartExchange with envA set for the dialer
// (in A) and envB for the listener (in B).
func startExchangeEnv(t *testing.T, lab *netlab.Lab, bin string, envA, envB []string, o netlab.ExchangeOptions) (listener, dialer *netlab.Proc) {
	t.Helper()
	addr := net.JoinHostPort(lab.B.Addr(o.IPv6).String(), strconv.Itoa(o.Port))
	common := []string{"-bytes", fmt.Sprint(o.Bytes), "-seed", fmt.Sprint(o.Seed), "-progress", fmt.Sprint(o.ProgressEvery)}
	args := append(append([]string{}, envB...), append([]string{bin, "exchange", "-listen", addr}, common...)...)
	listener, err := lab.Start(lab.B, "env", args...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := netlab.WaitEvent(listener, 30*time.Second, netlab.IsEvent(netlab.EventListening)); err != nil {
		listener.Kill()
		t.Fatal(err)
	}
	dialer, err = lab.Start(lab.A, "env", append(append([]string{}, envA...), append([]string{bin, "exchange", "-dial", addr}, common...)...)...)
	if err != nil {
		listener.Kill()
		t.Fatal(err)
	}
	return listener, dialer
}
