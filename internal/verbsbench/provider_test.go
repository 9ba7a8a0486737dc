package verbsbench

import (
	"context"
	"errors"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/rocepeer"
	"github.com/rsock-go/rsock/verbs"
)

// testProvider is registered as a provider whose devices, like an RDMA
// device's, expose no UDP port: soft-RoCE devices on port 4791 of the
// requested IP, behind the verbs.Device interface alone.
const testProvider = "verbsbench-test"

// hiddenPort is a device without LocalAddr, under testProvider's name.
type hiddenPort struct{ verbs.Device }

func (hiddenPort) Provider() string { return testProvider }

func init() {
	verbs.RegisterProvider(testProvider, func(ip netip.Addr) (verbs.Device, error) {
		dev, err := rocepeer.OpenDevice(netip.AddrPortFrom(ip, roceUDPPort))
		if err != nil {
			return nil, err
		}
		return hiddenPort{dev}, nil
	})
}

// TestRegisteredProvider runs tests through a device opened from the
// provider registry, addressed by its GID and port 4791 as an RDMA
// device is (the path -provider rdmacore takes).
func TestRegisteredProvider(t *testing.T) {
	// Addresses of 127/8 that no other test uses (test packages run in
	// parallel, and the others take 4791 on 127.0.0.1-5).
	client := netip.MustParseAddrPort("127.0.47.2:0")
	server := netip.MustParseAddrPort("127.0.47.3:0")
	for _, a := range []netip.AddrPort{client, server} {
		dev, err := rocepeer.OpenDevice(netip.AddrPortFrom(a.Addr(), roceUDPPort))
		if errors.Is(err, syscall.EADDRINUSE) {
			t.Fatalf("UDP %v:4791 is in use by another program: the test needs it free", a.Addr())
		}
		if err != nil {
			t.Fatal(err)
		}
		dev.Close()
	}
	ctx := context.Background()
	addr, wait := startServerWith(t, ctx, ServerConfig{Provider: testProvider, RoCE: server, Timeout: 5 * time.Second})
	conn := dial(t, addr)
	for _, c := range []Config{
		{Test: TestWriteBW, Size: 4096, MTU: 1024, Iters: 100, TxDepth: 16},
		{Test: TestWriteLat, Size: 64, Iters: 50},
	} {
		c.Provider, c.RoCE = testProvider, client
		r, err := Run(ctx, conn, c)
		if err != nil {
			t.Fatalf("%v: %v", c.Test, err)
		}
		if r.Iters != c.Iters || r.Bytes != c.Iters*uint64(c.Size) {
			t.Errorf("%v: %d iterations, %d bytes; want %d, %d", c.Test, r.Iters, r.Bytes, c.Iters, c.Iters*uint64(c.Size))
		}
		if want := testProvider + "/softroce0"; !strings.HasPrefix(r.Transport, testProvider+"/") {
			t.Errorf("%v: transport %q, want %s", c.Test, r.Transport, want)
		}
		if r.LocalRoCE != "127.0.47.2:4791" || r.PeerRoCE != "127.0.47.3:4791" {
			t.Errorf("%v: link %s <-> %s, want 127.0.47.2:4791 <-> 127.0.47.3:4791", c.Test, r.LocalRoCE, r.PeerRoCE)
		}
	}
	if err := Bye(conn); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("server: %v", err)
	}
}

// TestUnknownProvider fails before anything goes to the server, naming
// the providers the binary has.
func TestUnknownProvider(t *testing.T) {
	addr, wait := startServer(t, context.Background())
	conn := dial(t, addr)
	_, err := Run(context.Background(), conn, Config{Test: TestWriteBW, Provider: "nosuch"})
	if err == nil || !strings.Contains(err.Error(), `provider "nosuch" is not built into this binary`) ||
		!strings.Contains(err.Error(), ProviderSoftRoCE) {
		t.Fatalf("Run with an unknown provider: %v", err)
	}
	conn.Close()
	if err := wait(); err != nil {
		t.Fatalf("server: %v", err)
	}
}
