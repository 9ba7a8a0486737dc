//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync/atomic"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/internal/netns"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// offloadCombos are the sender GSO and receiver GRO settings tested.
var offloadCombos = []struct {
	name     string
	gso, gro bool
}{
	{"gso-gro", true, true},
	{"gso", true, false},
	{"gro", false, true},
	{"mmsg", false, false},
}

// listenOffloads returns a link with GSO and GRO as asked, skipping the
// test if the kernel does not have an offload that was asked for.
func listenOffloads(t testing.TB, addr netip.AddrPort, gso, gro bool) *Link {
	t.Helper()
	l := listen(t, Config{Addr: addr, DisableGSO: !gso, DisableGRO: !gro})
	hasGSO, hasGRO := l.Offloads()
	if hasGSO && !gso || hasGRO && !gro {
		t.Fatalf("Offloads() = %v, %v with DisableGSO %v, DisableGRO %v", hasGSO, hasGRO, !gso, !gro)
	}
	if gso && !hasGSO || gro && !hasGRO {
		t.Skipf("kernel without UDP GSO or GRO: have %v, %v", hasGSO, hasGRO)
	}
	return l
}

// expectedIDs returns the IPv4 ID that Send gives each of pkts under the
// grouping rule: runs of consecutive packets to the same address with the
// same length, the last possibly shorter, at most 64 and under 65508 bytes
// with ICRCs, get IDs 0, 1, 2, ...; without GSO every packet gets ID 0.
func expectedIDs(pkts []link.Packet, gso bool) []int {
	ids := make([]int, len(pkts))
	if !gso {
		return ids
	}
	for i := 0; i < len(pkts); {
		size, total, n := pkts[i].N, pkts[i].N+4, 1
		for i+n < len(pkts) && n < 64 {
			p := pkts[i+n]
			if p.Addr != pkts[i].Addr || p.ECN != pkts[i].ECN || p.N > size || total+p.N+4 > 65507 {
				break
			}
			ids[i+n] = n
			total += p.N + 4
			n++
			if p.N < size {
				break
			}
		}
		i += n
	}
	return ids
}

// checkSentICRCs checks that each sent packet's buffer holds the ICRC for
// the IPv4 ID in ids.
func checkSentICRCs(t *testing.T, from netip.AddrPort, pkts []link.Packet, ids []int) {
	t.Helper()
	for i, p := range pkts {
		ph := wire.PseudoHeader{Src: from, Dst: p.Addr, IPID: uint16(ids[i])}
		if got, want := wire.ICRCOf(p.Buf[p.N:]), wire.ComputeICRC(&ph, p.Bytes()); got != want {
			t.Fatalf("packet %d (N %d to %v): ICRC %08x, want %08x for IPv4 ID %d", i, p.N, p.Addr, got, want, ids[i])
		}
	}
}

// checkReceived checks that got holds exactly want, in order, from from,
// with good ICRCs.
func checkReceived(t *testing.T, got, want []link.Packet, from netip.AddrPort) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("received %d packets, want %d", len(got), len(want))
	}
	for i := range got {
		if !bytes.Equal(got[i].Buf, want[i].Bytes()) {
			t.Fatalf("packet %d: %d bytes differ from the %d sent", i, got[i].N, want[i].N)
		}
		if got[i].ICRC != link.ICRCGood || got[i].Addr != from {
			t.Fatalf("packet %d: ICRC %v from %v, want good from %v", i, got[i].ICRC, got[i].Addr, from)
		}
	}
}

func TestGSORun(t *testing.T) {
	dst := netip.MustParseAddrPort("127.0.0.1:4791")
	other := netip.MustParseAddrPort("127.0.0.2:4791")
	mk := func(spec ...any) []link.Packet {
		var p []link.Packet
		for i := 0; i < len(spec); i += 3 {
			for range spec[i].(int) {
				n := spec[i+1].(int)
				p = append(p, link.Packet{Buf: make([]byte, n+4), N: n, Addr: spec[i+2].(netip.AddrPort)})
			}
		}
		return p
	}
	for _, c := range []struct {
		name string
		pkts []link.Packet
		runs []int
	}{
		{"equal", mk(10, 1000, dst), []int{10}},
		{"shorter last", mk(5, 1000, dst, 1, 999, dst, 2, 1000, dst), []int{6, 2}},
		{"longer breaks", mk(3, 100, dst, 3, 200, dst), []int{3, 3}},
		{"destination breaks", mk(3, 100, dst, 2, 100, other, 1, 100, dst), []int{3, 2, 1}},
		{"64 segments", mk(150, 100, dst), []int{64, 64, 22}},
		{"64 KiB", mk(20, 4096, dst), []int{15, 5}},
		{"single", mk(1, 4096, dst, 1, 4097, dst), []int{1, 1}},
	} {
		var runs []int
		for i := 0; i < len(c.pkts); {
			n := gsoRun(c.pkts[i:], maxSegs)
			runs = append(runs, n)
			i += n
		}
		if fmt.Sprint(runs) != fmt.Sprint(c.runs) {
			t.Errorf("%s: runs %v, want %v", c.name, runs, c.runs)
		}
	}
}

func TestOffloadsExchange(t *testing.T) {
	loop6 := netip.MustParseAddrPort("[::1]:0")
	for _, addr := range []netip.AddrPort{loop4, loop6} {
		for _, c := range offloadCombos {
			t.Run(fmt.Sprintf("%v/%s", addr.Addr(), c.name), func(t *testing.T) {
				testExchange(t, addr, c.gso, c.gro)
			})
		}
	}
}

func testExchange(t *testing.T, addr netip.AddrPort, gso, gro bool) {
	if addr.Addr().Is6() {
		l, err := Listen(Config{Addr: addr})
		if err != nil {
			t.Skipf("%v unavailable: %v", addr.Addr(), err)
		}
		l.Close()
	}
	a := listenOffloads(t, addr, gso, false)
	b := listenOffloads(t, addr, false, gro)
	r := rand.New(rand.NewPCG(23, 24))
	for _, size := range []int{12, 200, 1000, 4096 + 28, 8192 + 28} {
		tx := bufs(64, size+4)
		for i := range tx {
			fill(&tx[i], size, b.LocalAddr(), r)
		}
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		checkSentICRCs(t, a.LocalAddr(), tx, expectedIDs(tx, gso))
		checkReceived(t, recvN(t, b, len(tx), size+4), tx, a.LocalAddr())
	}
}

// mixedBatch returns a batch mixing lengths and destinations b and c, with
// runs that end by a shorter packet, a longer one, another destination, a
// run longer than 64 packets, and a run beyond 64 KiB.
func mixedBatch(r *rand.Rand, b, c netip.AddrPort) []link.Packet {
	type part struct {
		n, size int
		dst     netip.AddrPort
	}
	parts := []part{
		{5, 1000, b}, {1, 500, b}, {3, 1000, c}, {2, 1000, b}, {1, 2000, b},
		{70, 100, b}, {1, 16, c}, {1, 16, b}, {20, 4124, c}, {4, 300, b},
		{1, 300, c}, {1, 300, b}, {2, 64, b}, {1, 12, b},
	}
	var tx []link.Packet
	for _, p := range parts {
		for range p.n {
			q := link.Packet{Buf: make([]byte, p.size+4)}
			fill(&q, p.size, p.dst, r)
			tx = append(tx, q)
		}
	}
	return tx
}

// split returns the packets of pkts addressed to dst.
func split(pkts []link.Packet, dst netip.AddrPort) []link.Packet {
	var out []link.Packet
	for _, p := range pkts {
		if p.Addr == dst {
			out = append(out, p)
		}
	}
	return out
}

func TestMixedBatchTwoDestinations(t *testing.T) {
	for _, cb := range offloadCombos {
		t.Run(cb.name, func(t *testing.T) {
			a := listenOffloads(t, loop4, cb.gso, false)
			b := listenOffloads(t, loop4, false, cb.gro)
			c := listenOffloads(t, loop4, false, cb.gro)
			r := rand.New(rand.NewPCG(25, 26))
			tx := mixedBatch(r, b.LocalAddr(), c.LocalAddr())
			if err := a.Send(tx); err != nil {
				t.Fatal(err)
			}
			checkSentICRCs(t, a.LocalAddr(), tx, expectedIDs(tx, cb.gso))
			for _, l := range []*Link{b, c} {
				want := split(tx, l.LocalAddr())
				checkReceived(t, recvN(t, l, len(want), 4200), want, a.LocalAddr())
			}
		})
	}
}

// TestCarryOver receives GRO messages into fewer packets than they hold:
// the rest must come first in the following calls, in order.
func TestCarryOver(t *testing.T) {
	a := listenOffloads(t, loop4, true, false)
	b := listenOffloads(t, loop4, false, true)
	r := rand.New(rand.NewPCG(27, 28))
	tx := bufs(100, 1100)
	for i := range tx {
		fill(&tx[i], 1000, b.LocalAddr(), r)
	}
	fill(&tx[39], 900, b.LocalAddr(), r) // ends the first message after 40
	if err := a.Send(tx[:60]); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(tx[60:]); err != nil {
		t.Fatal(err)
	}
	var got []link.Packet
	for _, k := range []int{1, 7, 3, 64, 2, 64} {
		rx := bufs(k, 1100)
		n, err := b.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		if n > k {
			t.Fatalf("Recv(%d packets) returned %d", k, n)
		}
		if len(got) == 0 {
			// The first call returns one packet of a 40-packet
			// coalesced message and keeps the rest.
			b.recvMu.Lock()
			kept := b.rx.inMsg && b.rx.seg == 1
			b.recvMu.Unlock()
			if n != 1 || !kept {
				t.Fatalf("first Recv(1): %d packets, rest of the message kept: %v", n, kept)
			}
		}
		for _, p := range rx[:n] {
			q := p
			q.Buf = bytes.Clone(p.Bytes())
			got = append(got, q)
		}
	}
	got = append(got, recvN(t, b, len(tx)-len(got), 1100)...)
	checkReceived(t, got, tx, a.LocalAddr())
	b.recvMu.Lock()
	pending := b.rx.next < b.rx.end
	b.recvMu.Unlock()
	if pending {
		t.Fatal("packets still pending after all were received")
	}
}

// TestStrictGRO sends a GSO message whose second segment is corrupted and
// whose third has the ICRC of an IPv4 ID outside 0..63: with StrictICRC
// both are bad, the others good.
func TestStrictGRO(t *testing.T) {
	for _, gro := range []bool{true, false} {
		for _, strict := range []bool{false, true} {
			l := listen(t, Config{Addr: loop4, StrictICRC: strict, DisableGRO: !gro})
			if _, has := l.Offloads(); has != gro {
				t.Skip("kernel without UDP GRO")
			}
			const n, segs = 500, 5
			payload := make([]byte, segs*(n+4))
			for i := range payload {
				payload[i] = byte(i * 13)
			}
			c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(loop4))
			if err != nil {
				t.Fatal(err)
			}
			from := c.LocalAddr().(*net.UDPAddr).AddrPort()
			c.Close()
			for i := range segs {
				seg := payload[i*(n+4) : (i+1)*(n+4)]
				id := uint16(i)
				if i == 2 {
					id = 1000
				}
				ph := wire.PseudoHeader{Src: from, Dst: l.LocalAddr(), IPID: id}
				wire.PutICRC(seg[n:], wire.ComputeICRC(&ph, seg[:n]))
			}
			payload[1*(n+4)+40] ^= 1
			// Reuse the port whose address the ICRCs cover.
			sendGSOFrom(t, from, l.LocalAddr(), n+4, payload)
			rx := bufs(segs, 600)
			for k := 0; k < segs; {
				m, err := l.Recv(rx[k:])
				if err != nil {
					t.Fatal(err)
				}
				k += m
			}
			bad := link.ICRCUnverified
			if strict {
				bad = link.ICRCBad
			}
			for i, p := range rx {
				want := link.ICRCGood
				switch i {
				case 1: // damaged: no IPv4 ID explains its ICRC
					want = link.ICRCBad
				case 2: // an ID a udp link does not send: unverified
					want = bad
				}
				if p.ICRC != want || p.N != n || p.Addr != from {
					t.Errorf("gro %v strict %v segment %d: ICRC %v N %d from %v, want %v N %d from %v",
						gro, strict, i, p.ICRC, p.N, p.Addr, want, n, from)
				}
			}
		}
	}
}

// sendGSOFrom sends payload as one GSO message of segment size gso, with
// don't-fragment, from a plain UDP socket bound to from.
func sendGSOFrom(t *testing.T, from, to netip.AddrPort, gso int, payload []byte) {
	t.Helper()
	c, err := net.ListenUDP("udp4", net.UDPAddrFromAddrPort(from))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	rc.Control(func(fd uintptr) {
		unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_DO)
	})
	oob := make([]byte, unix.CmsgSpace(2))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level, h.Type = unix.SOL_UDP, unix.UDP_SEGMENT
	h.SetLen(unix.CmsgLen(2))
	binary.NativeEndian.PutUint16(oob[unix.CmsgLen(0):], uint16(gso))
	if _, _, err := c.WriteMsgUDPAddrPort(payload, oob, to); err != nil {
		t.Skipf("GSO send from a plain socket: %v", err)
	}
}

// TestGSOFallback makes the kernel refuse GSO (SO_NO_CHECK turns off UDP
// checksums, which GSO needs: EINVAL) and checks that Send turns GSO off
// and still delivers every packet, with ICRCs for ID 0.
func TestGSOFallback(t *testing.T) {
	a := listenOffloads(t, loop4, true, false)
	b := listen(t, Config{Addr: loop4, StrictICRC: true})
	var soErr error
	if err := a.rc.Control(func(fd uintptr) {
		soErr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_NO_CHECK, 1)
	}); err != nil || soErr != nil {
		t.Skipf("SO_NO_CHECK: %v %v", err, soErr)
	}
	r := rand.New(rand.NewPCG(29, 30))
	tx := bufs(40, 1100)
	for i := range tx {
		fill(&tx[i], 1000, b.LocalAddr(), r)
	}
	fill(&tx[0], 500, b.LocalAddr(), r) // a plain datagram first
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	if gso, _ := a.Offloads(); gso {
		t.Fatal("GSO still on after the kernel refused it")
	}
	checkSentICRCs(t, a.LocalAddr(), tx, make([]int, len(tx)))
	checkReceived(t, recvN(t, b, len(tx), 1100), tx, a.LocalAddr())
}

func TestZeroAllocOffloads(t *testing.T) {
	for _, c := range offloadCombos {
		for _, rxLen := range []int{64, 5} {
			t.Run(fmt.Sprintf("%s/recv%d", c.name, rxLen), func(t *testing.T) {
				a := listenOffloads(t, loop4, c.gso, false)
				b := listenOffloads(t, loop4, false, c.gro)
				r := rand.New(rand.NewPCG(31, 32))
				tx := bufs(64, 4200)
				for i := range tx {
					fill(&tx[i], 4096+28, b.LocalAddr(), r)
				}
				fill(&tx[40], 1000, b.LocalAddr(), r)
				fill(&tx[41], 2000, b.LocalAddr(), r)
				rx := bufs(rxLen, 4200)
				var failed atomic.Bool
				round := func() {
					if err := a.Send(tx); err != nil {
						failed.Store(true)
						return
					}
					for got := 0; got < len(tx); {
						n, err := b.Recv(rx)
						if err != nil {
							failed.Store(true)
							return
						}
						for _, p := range rx[:n] {
							if p.ICRC != link.ICRCGood {
								failed.Store(true)
							}
						}
						got += n
					}
				}
				round() // warm up
				allocs := testing.AllocsPerRun(50, round)
				if failed.Load() {
					t.Fatal("send or receive failed")
				}
				if allocs != 0 {
					t.Fatalf("%v allocations per round of Send(64)+Recv, want 0", allocs)
				}
			})
		}
	}
}

// inNetns runs fn on a thread switched into network namespace name.
// Sockets created by fn stay in that namespace.
func inNetns(t *testing.T, name string, fn func()) {
	t.Helper()
	if err := netns.Do(name, fn); err != nil {
		t.Error(err)
	}
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }

// TestWireGSOIPv4ID measures the IPv4 IDs Linux gives the segments of a GSO
// message. It builds two network namespaces joined by a veth pair whose
// sending end takes at most one segment per packet (gso_max_segs 1), so the
// kernel segments every GSO message in software before the wire, and
// captures the datagrams on the receiving end with an AF_PACKET socket.
// Each segment i must carry ID i and an ICRC that matches the headers as
// captured. Needs root and iproute2.
func TestWireGSOIPv4ID(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs iproute2's ip command")
	}
	ip := func(args ...string) error {
		out, err := exec.Command("ip", args...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %v: %v: %s", args, err, out)
		}
		return nil
	}
	nsA := fmt.Sprintf("rsock-udp-a-%d", os.Getpid())
	nsB := fmt.Sprintf("rsock-udp-b-%d", os.Getpid())
	for _, ns := range []string{nsA, nsB} {
		if err := ip("netns", "add", ns); err != nil {
			t.Skipf("cannot create a network namespace: %v", err)
		}
		t.Cleanup(func() {
			if err := ip("netns", "del", ns); err != nil {
				t.Error(err)
			}
		})
	}
	for _, args := range [][]string{
		{"-n", nsA, "link", "add", "vA", "type", "veth", "peer", "name", "vB", "netns", nsB},
		{"-n", nsA, "link", "set", "vA", "mtu", "9000", "gso_max_segs", "1", "up"},
		{"-n", nsB, "link", "set", "vB", "mtu", "9000", "up"},
		{"-n", nsA, "addr", "add", "192.0.2.1/24", "dev", "vA"},
		{"-n", nsB, "addr", "add", "192.0.2.2/24", "dev", "vB"},
	} {
		if err := ip(args...); err != nil {
			t.Fatal(err)
		}
	}
	var a, b *Link
	inNetns(t, nsA, func() { a = listen(t, Config{Addr: netip.MustParseAddrPort("192.0.2.1:0")}) })
	inNetns(t, nsB, func() { b = listen(t, Config{Addr: netip.MustParseAddrPort("192.0.2.2:0")}) })
	if gso, gro := a.Offloads(); !gso || !gro {
		t.Skip("kernel without UDP GSO or GRO")
	}
	r := rand.New(rand.NewPCG(33, 34))

	// Warm up (ARP) with one packet.
	warm := bufs(1, 100)
	fill(&warm[0], 50, b.LocalAddr(), r)
	if err := a.Send(warm); err != nil {
		t.Fatal(err)
	}
	recvN(t, b, 1, 100)

	var fd int
	inNetns(t, nsB, func() {
		ifi, err := net.InterfaceByName("vB")
		if err != nil {
			t.Fatal(err)
		}
		fd, err = unix.Socket(unix.AF_PACKET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, int(htons(unix.ETH_P_IP)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_IP), Ifindex: ifi.Index}); err != nil {
			t.Fatal(err)
		}
		if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &unix.Timeval{Sec: 5}); err != nil {
			t.Fatal(err)
		}
	})

	// A 21-segment message (the last shorter), then 70 packets: 64 + 6.
	tx := bufs(91, 4200)
	for i := range 20 {
		fill(&tx[i], 4096+28, b.LocalAddr(), r)
	}
	fill(&tx[20], 1000, b.LocalAddr(), r)
	for i := 21; i < len(tx); i++ {
		fill(&tx[i], 100, b.LocalAddr(), r)
	}
	wantIDs := expectedIDs(tx, true)
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	got := recvN(t, b, len(tx), 4200)
	checkReceived(t, got, tx, a.LocalAddr())

	buf := make([]byte, 65536)
	var ids []int
	for len(ids) < len(tx) {
		n, _, err := unix.Recvfrom(fd, buf, 0)
		if err != nil {
			t.Fatalf("capture after %d datagrams: %v", len(ids), err)
		}
		p := buf[:n]
		if n < 28 || p[0] != 0x45 || p[9] != 17 ||
			netip.AddrPortFrom(netip.AddrFrom4([4]byte(p[12:16])), uint16(p[20])<<8|uint16(p[21])) != a.LocalAddr() {
			continue
		}
		id := int(p[4])<<8 | int(p[5])
		if p[6]&0x40 == 0 {
			t.Fatalf("datagram %d without don't-fragment", len(ids))
		}
		if tot := int(p[2])<<8 | int(p[3]); tot != n || n != 28+tx[len(ids)].N+4 {
			t.Fatalf("datagram %d: %d bytes (IPv4 total length %d), want %d: not segmented?", len(ids), n, tot, 28+tx[len(ids)].N+4)
		}
		if wire.ComputeICRCFromHeaders(p[:28], p[28:n-4]) != wire.ICRCOf(p[n-4:]) {
			t.Fatalf("datagram %d (IPv4 ID %d): ICRC does not match the headers on the wire", len(ids), id)
		}
		ids = append(ids, id)
	}
	t.Logf("IPv4 IDs on the wire: %v", ids)
	if fmt.Sprint(ids) != fmt.Sprint(wantIDs) {
		t.Fatalf("IPv4 IDs %v, want %v", ids, wantIDs)
	}

	// With segmentation left to the receiver (the whole GSO message
	// crosses the veth pair), b gets coalesced messages; still all good.
	if err := ip("-n", nsA, "link", "set", "vA", "gso_max_segs", "65535"); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	checkReceived(t, recvN(t, b, len(tx), 4200), tx, a.LocalAddr())
}
