//go:build linux

package hostile

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// TestForgedICMP aims forged ICMP "fragmentation needed" (IPv4, MTU 552)
// and ICMPv6 "packet too big" (MTU 1280) at both ends of a verified
// two-way stream between two udp-link devices, from a raw socket at a
// third address, each quoting the IP and UDP headers of one of the
// stream's flows, as an off-path attacker who guessed the ports would.
// The stream's packets (4 KiB MTU) are larger than either MTU. The
// stream must complete byte-exact with no send error, and the MTU a new
// connection would take (udp.RouteMTU) must still be the interface's.
// The test checks that the kernel took the ICMP (its learned path MTU
// fell to the forged one), so it cannot pass without the attack.
//
// It runs on the loopback interface of a network namespace of its own:
// the kernel keeps a learned path MTU for ten minutes, and the host's
// loopback must not keep it.
func TestForgedICMP(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("not root: cannot open raw sockets or create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command to create a network namespace")
	}
	for _, c := range []struct {
		name           string
		a, b, attacker string
		mtu            int
	}{
		{"ipv4", "127.0.0.1", "127.0.0.2", "127.0.0.9", 552},
		{"ipv6", "fd00:77::1", "fd00:77::2", "fd00:77::9", 1280},
	} {
		t.Run(c.name, func(t *testing.T) {
			ns := fmt.Sprintf("rsock-icmp-%s-%d", c.name, os.Getpid())
			ipCmd(t, "netns", "add", ns)
			t.Cleanup(func() {
				if out, err := exec.Command("ip", "netns", "del", ns).CombinedOutput(); err != nil {
					t.Errorf("ip netns del %s: %v: %s", ns, err, out)
				}
			})
			ipCmd(t, "-n", ns, "link", "set", "lo", "up")
			addrA, addrB, attacker := netip.MustParseAddr(c.a), netip.MustParseAddr(c.b), netip.MustParseAddr(c.attacker)
			if addrA.Is6() {
				for _, a := range []netip.Addr{addrA, addrB, attacker} {
					ipCmd(t, "-n", ns, "addr", "add", a.String()+"/128", "dev", "lo", "nodad")
				}
			}
			testForgedICMP(t, ns, addrA, addrB, attacker, c.mtu)
		})
	}
}

func testForgedICMP(t *testing.T, ns string, addrA, addrB, attacker netip.Addr, mtu int) {
	a, b := icmpSide(t, "a", ns, addrA), icmpSide(t, "b", ns, addrB)
	var loMTU int
	inNetns(t, ns, func() {
		var err error
		if loMTU, err = udp.RouteMTU(addrA, addrB); err != nil {
			t.Fatal(err)
		}
	})
	sa, sb := connect(t, a, b)
	defer sb.Close()
	defer sa.Close()
	if got := sa.Stats().QP.PathMTU; got != 4096 {
		t.Fatalf("the stream's path MTU is %d, want 4096 (packets larger than the forged MTU)", got)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	const minBytes = 48 << 20
	flows := []*flow{runFlow(sa, sb, 11, minBytes, stop, &wg), runFlow(sb, sa, 12, minBytes, stop, &wg)}
	stopped := false
	defer func() {
		if !stopped {
			close(stop)
			sa.Close()
			sb.Close()
			wg.Wait()
		}
	}()

	var fd int
	inNetns(t, ns, func() {
		var err error
		if fd, err = icmpSocket(attacker); err != nil {
			t.Fatal(err)
		}
	})
	defer unix.Close(fd)
	// Ten rounds, 100 ms apart, each telling both ends that the other's
	// flow needs a smaller MTU, quoting the flow's own addresses and ports.
	for range 10 {
		for _, d := range [][2]*side{{a, b}, {b, a}} {
			if err := sendICMPTooBig(fd, d[0].link, d[1].link, mtu); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	inNetns(t, ns, func() {
		for _, d := range [][2]*side{{a, b}, {b, a}} {
			learned, err := udp.LearnedPathMTU(d[0].link.Addr(), d[1].link.Addr())
			if err != nil {
				t.Fatal(err)
			}
			if learned != mtu {
				t.Fatalf("the kernel's path MTU from %v to %v is %d after the forged ICMP, want %d: the attack did not land",
					d[0].link.Addr(), d[1].link.Addr(), learned, mtu)
			}
			route, err := udp.RouteMTU(d[0].link.Addr(), d[1].link.Addr())
			if err != nil {
				t.Fatal(err)
			}
			if route != loMTU {
				t.Errorf("RouteMTU from %v to %v is %d after the forged ICMP, want lo's %d", d[0].link.Addr(), d[1].link.Addr(), route, loMTU)
			}
		}
	})
	close(stop)
	stopped = true
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		sa.Close()
		sb.Close()
		<-done
		t.Fatal("the stream hung")
	}
	for i, f := range flows {
		if f.err != nil || f.got != f.sent || f.got < minBytes {
			t.Errorf("flow %d: sent %d, received %d of at least %d: %v", i, f.sent, f.got, minBytes, f.err)
		}
	}
	for _, s := range []*side{a, b} {
		if c := s.dev.Counters(); c.ICRCErrors != 0 {
			t.Errorf("%s: %d ICRC errors", s.name, c.ICRCErrors)
		}
	}
	if !t.Failed() {
		t.Logf("streams of %d and %d bytes complete, byte-exact, across forged ICMP (MTU %d)", flows[0].got, flows[1].got, mtu)
	}
}

// icmpSide opens one end of the stream for TestForgedICMP: a udp-link
// device in namespace ns with a 4 KiB MTU, and its endpoint.
func icmpSide(t *testing.T, name, ns string, addr netip.Addr) *side {
	t.Helper()
	s := &side{name: name}
	var l *udp.Link
	inNetns(t, ns, func() {
		var err error
		if l, err = udp.Listen(udp.Config{Addr: netip.AddrPortFrom(addr, 0), StrictICRC: true}); err != nil {
			t.Fatal(err)
		}
	})
	dev, err := softroce.Open(softroce.Config{Link: l, MaxMTU: verbs.MTU4096})
	if err != nil {
		l.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	s.dev, s.link = dev, l.LocalAddr()
	if s.ep, err = rsock.NewEndpoint(dev, rsock.Config{}); err != nil {
		t.Fatal(err)
	}
	s.params = s.ep.Params()
	return s
}

// icmpSocket opens a raw ICMP (or ICMPv6) socket bound to from.
func icmpSocket(from netip.Addr) (int, error) {
	family, proto := unix.AF_INET6, unix.IPPROTO_ICMPV6
	var sa unix.Sockaddr = &unix.SockaddrInet6{Addr: from.As16()}
	if from.Is4() {
		family, proto = unix.AF_INET, unix.IPPROTO_ICMP
		sa = &unix.SockaddrInet4{Addr: from.As4()}
	}
	fd, err := unix.Socket(family, unix.SOCK_RAW|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return -1, fmt.Errorf("raw ICMP socket: %w", err)
	}
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return -1, fmt.Errorf("raw ICMP socket at %v: %w", from, err)
	}
	return fd, nil
}

// sendICMPTooBig tells victim, from the raw socket fd, that its datagrams
// to peer need an MTU of mtu: an ICMP "fragmentation needed" (type 3 code
// 4) or an ICMPv6 "packet too big" (type 2), quoting the IP and UDP
// headers of a 4 KiB datagram from victim to peer.
func sendICMPTooBig(fd int, victim, peer netip.AddrPort, mtu int) error {
	be := binary.BigEndian
	const payload = 4096 + 64
	var udpHdr [8]byte
	be.PutUint16(udpHdr[0:], victim.Port())
	be.PutUint16(udpHdr[2:], peer.Port())
	be.PutUint16(udpHdr[4:], 8+payload)
	if victim.Addr().Is4() {
		var m [8 + 20 + 8]byte
		m[0], m[1] = 3, 4 // destination unreachable, fragmentation needed
		be.PutUint16(m[6:], uint16(mtu))
		ip := m[8:28]
		ip[0] = 0x45
		be.PutUint16(ip[2:], 20+8+payload)
		be.PutUint16(ip[6:], 0x4000) // DF
		ip[8], ip[9] = 64, unix.IPPROTO_UDP
		src, dst := victim.Addr().As4(), peer.Addr().As4()
		copy(ip[12:], src[:])
		copy(ip[16:], dst[:])
		be.PutUint16(ip[10:], ^onesSum(ip))
		copy(m[28:], udpHdr[:])
		be.PutUint16(m[2:], ^onesSum(m[:]))
		return unix.Sendto(fd, m[:], 0, &unix.SockaddrInet4{Addr: victim.Addr().As4()})
	}
	var m [8 + 40 + 8]byte
	m[0] = 2 // packet too big; the kernel fills in the checksum
	be.PutUint32(m[4:], uint32(mtu))
	ip := m[8:48]
	ip[0] = 0x60
	be.PutUint16(ip[4:], 8+payload)
	ip[6], ip[7] = unix.IPPROTO_UDP, 64
	src, dst := victim.Addr().As16(), peer.Addr().As16()
	copy(ip[8:], src[:])
	copy(ip[24:], dst[:])
	copy(m[48:], udpHdr[:])
	return unix.Sendto(fd, m[:], 0, &unix.SockaddrInet6{Addr: victim.Addr().As16()})
}

// onesSum is the 16-bit ones' complement sum of b (of even length).
func onesSum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// ipCmd runs ip with args, failing t if it fails.
func ipCmd(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v: %s", args, err, out)
	}
}
