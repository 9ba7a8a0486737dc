package netlab

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// netnsList returns ip netns list's output.
func netnsList(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("ip", "netns", "list").CombinedOutput()
	if err != nil {
		t.Fatalf("ip netns list: %v: %s", err, out)
	}
	return string(out)
}

func TestLabMakesAndRemovesItsNamespaces(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	lab, err := New(Config{MTU: 9000, Relay: true, Prefix: "netlab-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	list := netnsList(t)
	for _, ns := range []*Namespace{lab.A, lab.B, lab.M} {
		if !strings.Contains(list, ns.Name) {
			t.Errorf("namespace %s missing from %q", ns.Name, list)
		}
	}
	out, err := lab.A.Run("ip", "link", "show", devA)
	if err != nil || !strings.Contains(out, "mtu 9000") {
		t.Errorf("A's veth: %v %q", err, out)
	}
	out, err = lab.A.Run("ethtool", "-k", devA)
	for _, feature := range []string{"tcp-segmentation-offload: off", "generic-segmentation-offload: off", "tx-udp-segmentation: off"} {
		if err != nil || !strings.Contains(out, feature) {
			t.Errorf("A's veth offloads: want %q: %v %q", feature, err, out)
		}
	}
	// Each end knows the other's link-layer address for good, over both
	// IP versions.
	for _, ns := range []*Namespace{lab.A, lab.B} {
		out, err := ns.Run("ip", "neigh", "show", "dev", ns.Dev)
		if err != nil || strings.Count(out, "PERMANENT") != 2 {
			t.Errorf("%s's neighbours: %v %q", ns.Name, err, out)
		}
	}
	// A process still running is ended by Close.
	p, err := lab.Start(lab.B, "sleep", "600")
	if err != nil {
		t.Fatal(err)
	}
	if err := lab.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	default:
		t.Errorf("%v still runs after Close", p)
	}
	list = netnsList(t)
	for _, ns := range []*Namespace{lab.A, lab.B, lab.M} {
		if strings.Contains(list, ns.Name) {
			t.Errorf("namespace %s still there after Close: %q", ns.Name, list)
		}
	}
	if err := lab.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// sendUDP sends count UDP datagrams from A to B's discard port, with
// bash's /dev/udp.
func sendUDP(t *testing.T, lab *Lab, count int) {
	t.Helper()
	script := "for i in $(seq " + strconv.Itoa(count) + "); do echo x > /dev/udp/" + lab.B.IPv4.String() + "/9; done"
	if out, err := lab.A.Run("bash", "-c", script); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
}

func TestDropIngressCounts(t *testing.T) {
	if err := Check(); err != nil {
		t.Skip(err)
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash for /dev/udp")
	}
	lab, err := New(Config{Prefix: "netlab-test"})
	if err != nil {
		t.Fatal(err)
	}
	defer lab.Close()
	sendUDP(t, lab, 50)
	seen, dropped, err := lab.IngressCounts(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	if seen < 50 || dropped != 0 {
		t.Errorf("no loss: B saw %d frames and dropped %d, want at least 50 and 0", seen, dropped)
	}
	// Each baseline is read after its rule is in place: a stray frame (IPv6
	// neighbour discovery) may arrive at any time.
	if err := lab.DropIngress(lab.B, 1000); err != nil {
		t.Fatal(err)
	}
	if seen, dropped, err = lab.IngressCounts(lab.B); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, lab, 40)
	seen2, dropped2, err := lab.IngressCounts(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	if seen2-seen < 40 || dropped2-dropped != seen2-seen {
		t.Errorf("outage: B saw %d more frames and dropped %d more, want at least 40, all dropped", seen2-seen, dropped2-dropped)
	}
	// A share: 50% of 400 frames, far from 0 and from all.
	if err := lab.DropIngress(lab.B, 500); err != nil {
		t.Fatal(err)
	}
	if seen2, dropped2, err = lab.IngressCounts(lab.B); err != nil {
		t.Fatal(err)
	}
	sendUDP(t, lab, 400)
	seen3, dropped3, err := lab.IngressCounts(lab.B)
	if err != nil {
		t.Fatal(err)
	}
	if n, d := seen3-seen2, dropped3-dropped2; n < 400 || d < n/4 || d > n*3/4 {
		t.Errorf("50%% loss: dropped %d of %d frames", d, n)
	}
	if err := lab.DropIngress(lab.B, 0); err != nil {
		t.Fatal(err)
	}
	if err := lab.DropIngress(lab.B, 1001); err == nil {
		t.Error("drop 1001 per mille: no error")
	}
}
