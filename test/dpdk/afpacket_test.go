//go:build dpdk

package dpdk

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
)

// streamLen is how many bytes dialClient sends and expects back.
const streamLen = 4 << 20

// echoRoundTrip writes n random bytes to c, an echo server's
// connection, and checks that the same bytes come back.
func echoRoundTrip(c net.Conn, n int) error {
	want := make([]byte, n)
	rand.Read(want)
	errc := make(chan error, 1)
	go func() {
		_, err := c.Write(want)
		errc <- err
	}()
	got := make([]byte, n)
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		return err
	}
	if err := <-errc; err != nil {
		return err
	}
	if !bytes.Equal(got, want) {
		return errors.New("the echoed bytes differ")
	}
	return nil
}

// dialClient dials the echo server at $RSOCK_DPDK_TEST_ADDR with netconn,
// sends streamLen random bytes, and checks that the same bytes come back;
// it reports the connection's transport on stderr.
func dialClient() int {
	err := func() error {
		c, err := netconn.Dial("tcp", os.Getenv(childAddrEnv))
		if err != nil {
			return err
		}
		defer c.Close()
		fmt.Fprintf(os.Stderr, "transport %s\n", c.(*netconn.Conn).Transport())
		return echoRoundTrip(c, streamLen)
	}()
	netconn.CloseIdleDevices()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Fprintln(os.Stderr, "byte-exact")
	return 0
}

// afPacketEnv is the environment of a process whose netconn runs on
// the dpdk link on net_af_packet over the namespace's veth, or (dpdk
// false) on the udp link. With own, over IPv6, the dpdk link has an
// address of its own (dpdkIPv6), which the kernel does not have:
// neighbour discovery for it is the link's alone. Only a dpdk peer, whose
// RSOCK_DPDK_IP prefix holds that address, takes it for a RoCE address
// other than the TCP connection's; a udp peer needs the address it dialed.
func afPacketEnv(ns *netlab.Namespace, useDPDK, ipv6, own bool) []string {
	if !useDPDK {
		return []string{netconn.EnvLink + "=udp"}
	}
	ip := ns.IPv4.String() + "/24"
	if ipv6 {
		ip = ns.IPv6.String() + "/64"
		if own {
			ip = dpdkIPv6(ns).String() + "/64"
		}
	}
	return []string{
		netconn.EnvLink + "=dpdk",
		dpdk.EnvArgs + "=--no-huge -m 256 --no-pci --no-telemetry --log-level=lib.eal:warning",
		dpdk.EnvPort + "=net_af_packet0,iface=" + ns.Dev,
		dpdk.EnvIP + "=" + ip,
	}
}

// dpdkIPv6 is the dpdk link's IPv6 address in ns: the namespace's own
// plus 0x100, in the same /64.
func dpdkIPv6(ns *netlab.Namespace) netip.Addr {
	a := ns.IPv6.As16()
	a[14]++
	return netip.AddrFrom16(a)
}

// TestAFPacket runs a netconn stream between two processes in two
// network namespaces joined by a veth pair at MTU 1500: the echo server
// in A, the client in B, each on the dpdk link on net_af_packet over its
// veth or on the udp link. Byte-exact, each reporting its own transport.
// Over IPv6 two dpdk links resolve each other with neighbour
// solicitations for addresses only they have; against the udp link the
// dpdk link shares the kernel's address (the peer's RoCE address must be
// the one its TCP connection reached).
func TestAFPacket(t *testing.T) {
	if err := netlab.Check(); err != nil {
		t.Skip(err)
	}
	for _, c := range []struct {
		name                   string
		serverDPDK, dial, ipv6 bool
	}{
		{"dpdk-dpdk", true, true, false},
		{"dpdk-udp", true, false, false},
		{"udp-dpdk", false, true, false},
		{"ipv6/dpdk-dpdk", true, true, true},
		{"ipv6/dpdk-udp", true, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			lab, err := netlab.New(netlab.Config{MTU: 1500, Prefix: "rsdpdk"})
			if err != nil {
				t.Fatal(err)
			}
			defer lab.Close()
			runPair(t, lab, c.serverDPDK, c.dial, c.ipv6)
		})
	}
}

func runPair(t *testing.T, lab *netlab.Lab, serverDPDK, clientDPDK, ipv6 bool) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	transport := func(d bool) string {
		if d {
			return "transport rdma/softroce/dpdk"
		}
		return "transport rdma/softroce/udp"
	}
	srv := lab.A.Command(ctx, exe, "-test.run=^$")
	listen := netip.AddrPortFrom(lab.A.Addr(ipv6), 0).String()
	srv.Env = append(append(os.Environ(), childEnv+"=echo", childAddrEnv+"="+listen), afPacketEnv(lab.A, serverDPDK, ipv6, clientDPDK)...)
	addr, srvErr := startEcho(t, srv)
	cli := lab.B.Command(ctx, exe, "-test.run=^$")
	cli.Env = append(append(os.Environ(), childEnv+"=dial", childAddrEnv+"="+addr), afPacketEnv(lab.B, clientDPDK, ipv6, serverDPDK)...)
	var cliErr bytes.Buffer
	cli.Stderr = &cliErr
	if err := cli.Run(); err != nil {
		t.Fatalf("client: %v; stderr: %s; server: %s", err, cliErr.String(), srvErr.String())
	}
	if err := srv.Wait(); err != nil {
		t.Fatalf("server: %v; stderr: %s", err, srvErr.String())
	}
	if s := cliErr.String(); !strings.Contains(s, transport(clientDPDK)) || !strings.Contains(s, "byte-exact") {
		t.Fatalf("client: %s", s)
	}
	t.Logf("client: %s; server: %s", strings.TrimSpace(cliErr.String()), strings.TrimSpace(srvErr.String()))
	if s := srvErr.String(); !strings.Contains(s, transport(serverDPDK)) {
		t.Fatalf("server: %s", s)
	}
	for _, p := range []*exec.Cmd{srv, cli} {
		if _, err := os.Stat(fmt.Sprintf("/var/run/dpdk/rsock-%d", p.Process.Pid)); err == nil {
			t.Errorf("runtime directory of %d left behind", p.Process.Pid)
		}
	}
}
