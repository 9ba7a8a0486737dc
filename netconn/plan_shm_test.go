package netconn

import (
	"errors"
	"strings"
	"testing"

	"github.com/rsock-go/rsock/fallback"
)

// The plan with shm: every setting against same host or not, shm
// possible or not, memif possible or not (no rdma-core device). Columns:
//
//	same host:  yes yes yes yes  no  no  no  no
//	shm:        yes yes  no  no yes yes  no  no
//	memif:      yes  no yes  no yes  no yes  no

var shmFacts = []struct{ same, shm, memif bool }{
	{true, true, true}, {true, true, false}, {true, false, true}, {true, false, false},
	{false, true, true}, {false, true, false}, {false, false, true}, {false, false, false},
}

func shmPlanIn(settings string, col int, side string) PlanInput {
	provider, link, _ := strings.Cut(settings, "/")
	f := shmFacts[col]
	in := PlanInput{Provider: provider, Link: link, Local: planLocal, Remote: planRemoteHost, Side: side,
		Host: HostFacts{RDMACore: errNoRDMACore, SameHost: map[string]error{
			LinkShm: errors.New("no memfd"), LinkMemif: errMemifFull}}}
	if f.same {
		in.Remote = planLocal
	}
	if f.shm {
		in.Host.SameHost[LinkShm] = nil
	}
	if f.memif {
		in.Host.SameHost[LinkMemif] = nil
	}
	return in
}

func shmGrid(t *testing.T, name string, want map[string]string, run func(settings string, col int) (Plan, error)) {
	t.Helper()
	for settings, row := range want {
		var got []string
		for col := range shmFacts {
			got = append(got, outcome(run(settings, col)))
		}
		if strings.Join(got, " ") != strings.Join(strings.Fields(row), " ") {
			t.Errorf("%s %s:\n got  %s\n want %s", name, settings, strings.Join(got, " "), row)
		}
	}
}

// TestPlanShmDial: auto prefers shm on one host, then memif; a setting
// that names a link keeps it.
func TestPlanShmDial(t *testing.T) {
	shmGrid(t, "dial", map[string]string{
		"auto/auto":     "shm+ shm+ memif+ -no_fast_path -no_fast_path -no_fast_path -no_fast_path -no_fast_path",
		"auto/shm":      "shm+ shm+ -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"shm/auto":      "shm+ shm+ -no_fast_path -no_fast_path -no_fast_path -no_fast_path -no_fast_path -no_fast_path",
		"shm/shm":       "shm+ shm+ -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/memif":    "memif+ -setup memif+ -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"softroce/auto": "memif+ udp memif+ udp udp udp udp udp",
		"auto/udp":      "udp udp udp udp udp udp udp udp",
		"tcp/auto":      "-rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off",
	}, func(settings string, col int) (Plan, error) {
		return ChoosePlan(shmPlanIn(settings, col, SideDialer))
	})
}

// shmHello is a dialer's shm offer of the given kind.
func shmHello(kind string) *fallback.Hello {
	h := planHello("udp", planLocal)
	h.Provider, h.Link = ProviderShm, LinkShm
	h.Capabilities |= fallback.CapShm
	switch kind {
	case "shm-offer": // a new channel on a socket
		h.ShmSocket = "rsock-shm-0123456789abcdef01234567"
	case "shm-reuse": // a live channel
		h.ShmChannel = 0x1234
	case "shm-path": // a file path, not a name rsock makes
		h.ShmSocket = "/run/some/socket"
	case "shm-other": // another program's abstract socket
		h.ShmSocket = "rsock-shm-xyz"
	default:
		panic(kind)
	}
	return h
}

// TestPlanShmAccept: a listener takes an shm offer only from a peer on
// this host, only in the form rsock makes, only when its settings run
// shm and shm can be set up.
func TestPlanShmAccept(t *testing.T) {
	shmGrid(t, "accept", map[string]string{
		"auto/auto shm-offer":     "shm+ shm+ -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/auto shm-reuse":     "shm+ shm+ -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"shm/shm shm-offer":       "shm+ shm+ -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/memif shm-offer":    "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"softroce/auto shm-offer": "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/auto shm-path":      "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"auto/auto shm-other":     "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
		"tcp/auto shm-offer":      "-rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off -rdma_off",
	}, func(row string, col int) (Plan, error) {
		settings, kind, _ := strings.Cut(row, " ")
		in := shmPlanIn(settings, col, SideListener)
		in.Peer = shmHello(kind)
		return ChoosePlan(in)
	})
	// A listener that runs shm only, and a dialer that offers a RoCE
	// endpoint instead.
	shmGrid(t, "accept", map[string]string{
		"auto/shm udp": "-setup -setup -setup -setup -not_same_host -not_same_host -not_same_host -not_same_host",
	}, func(row string, col int) (Plan, error) {
		settings, _, _ := strings.Cut(row, " ")
		in := shmPlanIn(settings, col, SideListener)
		in.Peer = planHello("udp", in.Remote)
		return ChoosePlan(in)
	})
}

// TestPlanShmConfirm: the dialer takes only an Accept on the link it
// offered.
func TestPlanShmConfirm(t *testing.T) {
	offered := Plan{Provider: ProviderShm, Link: LinkShm, Offer: true}
	for link, want := range map[string]string{LinkShm: "shm+", LinkMemif: "-setup", LinkUDP: "-setup"} {
		in := shmPlanIn("auto/auto", 0, SideDialer)
		in.Offered = &offered
		in.Peer = planHello("udp", in.Remote)
		in.Peer.Link = link
		if got := outcome(ChoosePlan(in)); got != want {
			t.Errorf("Accept on %s: %s, want %s", link, got, want)
		}
	}
}
