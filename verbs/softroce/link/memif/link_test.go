//go:build linux

package memif

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/internal/ethframe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

var (
	addrA = netip.MustParseAddrPort("127.0.0.1:4791")
	addrB = netip.MustParseAddrPort("127.0.0.2:4791")
)

const testSecret = "s3cr3t-for-tests"

// pair connects a server and a client link over a socket in a temporary
// directory; both are closed when the test ends.
func pair(t testing.TB, scfg, ccfg Config) (srv, cli *Link) {
	t.Helper()
	path := sockPath(t)
	if !scfg.Local.IsValid() {
		scfg.Local = addrA
	}
	if !ccfg.Local.IsValid() {
		ccfg.Local = addrB
	}
	ln, err := Listen(path, testSecret, scfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type res struct {
		l   *Link
		err error
	}
	ch := make(chan res, 1)
	go func() {
		l, err := ln.Accept()
		ch <- res{l, err}
	}()
	cli, err = Dial(path, testSecret, ccfg)
	r := <-ch
	if err != nil || r.err != nil {
		if cli != nil {
			cli.Close()
		}
		if r.l != nil {
			r.l.Close()
		}
		t.Fatalf("dial: %v, accept: %v", err, r.err)
	}
	t.Cleanup(func() { cli.Close(); r.l.Close() })
	return r.l, cli
}

// sockPath returns a socket path in a new 0700 directory.
func sockPath(t testing.TB) string {
	dir, err := os.MkdirTemp(t.TempDir(), "m")
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "memif.sock")
}

// mkPkt returns a RoCEv2 packet (BTH and payload) of n bytes, with room
// for the ICRC.
func mkPkt(n int, seed byte) []byte {
	b := make([]byte, n, n+wire.ICRCLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: uint32(seed)})
	for i := wire.BTHLen; i < n; i++ {
		b[i] = byte(i) ^ seed
	}
	return b
}

// recvN receives until n packets arrived, copying them out.
func recvN(t testing.TB, l *Link, n int) []link.Packet {
	t.Helper()
	var out []link.Packet
	pkts := make([]link.Packet, 16)
	for len(out) < n {
		k, err := l.Recv(pkts)
		if err != nil {
			t.Fatalf("Recv after %d of %d: %v", len(out), n, err)
		}
		for _, p := range pkts[:k] {
			p.Buf = append([]byte(nil), p.Bytes()...)
			out = append(out, p)
		}
	}
	return out
}

func TestExchange(t *testing.T) {
	for _, c := range []struct {
		name    string
		bufSize int
		sizes   []int
	}{
		{"small", 0, []int{12, 13, 64, 1000, 1500}},
		{"chained", 256, []int{200, 256, 1000, 4096 + 28, 8000}},
		{"mtu4096", 2048, []int{4096 + 28, 4096 + 12 + 16 + 3}},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv, cli := pair(t, Config{}, Config{BufferSize: c.bufSize, Log2RingSize: 6})
			if srv.PeerName() != "rsock" || cli.Name() != "memif" || srv.LocalAddr() != addrA {
				t.Fatalf("peer %q", srv.PeerName())
			}
			for _, dir := range []struct {
				from, to *Link
			}{{cli, srv}, {srv, cli}} {
				var sent []link.Packet
				for i, n := range c.sizes {
					sent = append(sent, link.Packet{Buf: mkPkt(n, byte(i)), N: n, Addr: dir.to.LocalAddr()})
				}
				if err := dir.from.Send(sent); err != nil {
					t.Fatal(err)
				}
				got := recvN(t, dir.to, len(sent))
				for i, p := range got {
					if !bytes.Equal(p.Bytes(), sent[i].Bytes()) {
						t.Fatalf("packet %d: got %d bytes, want %d", i, p.N, sent[i].N)
					}
					if p.ICRC != link.ICRCGood || p.Addr != dir.from.LocalAddr() {
						t.Fatalf("packet %d: ICRC %v from %v", i, p.ICRC, p.Addr)
					}
				}
			}
		})
	}
}

func TestIPv6(t *testing.T) {
	a6 := netip.MustParseAddrPort("[::1]:4791")
	b6 := netip.MustParseAddrPort("[fd00::2]:4791")
	srv, cli := pair(t, Config{Local: a6}, Config{Local: b6})
	for _, n := range []int{13, 64, 3000} {
		if err := cli.Send([]link.Packet{{Buf: mkPkt(n, 1), N: n, Addr: a6}}); err != nil {
			t.Fatal(err)
		}
		p := recvN(t, srv, 1)[0]
		if p.N != n || p.ICRC != link.ICRCGood || p.Addr != b6 {
			t.Fatalf("n=%d: got %d bytes, %v, from %v", n, p.N, p.ICRC, p.Addr)
		}
	}
	if err := cli.Send([]link.Packet{{Buf: mkPkt(20, 1), N: 20, Addr: addrA}}); err == nil {
		t.Fatal("IPv4 destination from an IPv6 link accepted")
	}
}

// injectFrame writes a raw frame into a link's send ring.
func injectFrame(t *testing.T, l *Link, frame []byte) {
	t.Helper()
	l.txMu.Lock()
	defer l.txMu.Unlock()
	free, err := l.tx.free()
	if err != nil {
		t.Fatal(err)
	}
	if used, err := l.tx.put([][]byte{frame}, len(frame), free); used == 0 || err != nil {
		t.Fatalf("inject: %d slots, %v", used, err)
	}
	l.publish()
}

// wireFrame builds a whole frame as Send would.
func wireFrame(t *testing.T, cfg *Config, dst netip.AddrPort, pkt []byte) []byte {
	var h [ethframe.MaxHeaderLen]byte
	var icrc [wire.ICRCLen]byte
	hl, err := ethframe.Headers(h[:], &ethframe.Ends{SrcMAC: cfg.LocalMAC, DstMAC: cfg.PeerMAC, Src: cfg.Local, Dst: dst}, pkt, &icrc)
	if err != nil {
		t.Fatal(err)
	}
	return append(append(append([]byte(nil), h[:hl]...), pkt...), icrc[:]...)
}

func TestReceivedFrames(t *testing.T) {
	srv, cli := pair(t, Config{}, Config{})
	good := wireFrame(t, &cli.cfg, addrA, mkPkt(40, 3))
	bad := append([]byte(nil), good...)
	bad[len(bad)-10] ^= 1 // payload bit: ICRC fails
	ecn := append([]byte(nil), good...)
	ecn[wire.EthernetLen+1] |= 3 // IPv4 ECN bits: masked by the ICRC
	ecn[wire.EthernetLen+10] = 0 // and the IP checksum, also masked
	port := append([]byte(nil), good...)
	port[wire.EthernetLen+wire.IPv4MinLen+3] = 1 // UDP port 4609: not RoCEv2
	arp := append([]byte(nil), good...)
	arp[12], arp[13] = 0x08, 0x06
	for _, f := range [][]byte{good, bad, port, arp, good[:30], ecn} {
		injectFrame(t, cli, f)
	}
	got := recvN(t, srv, 3)
	if got[0].ICRC != link.ICRCGood || got[1].ICRC != link.ICRCBad || got[2].ICRC != link.ICRCGood {
		t.Fatalf("ICRC %v %v %v", got[0].ICRC, got[1].ICRC, got[2].ICRC)
	}
	if s := srv.Stats(); s.RxDropped != 3 || s.Received != 3 {
		t.Fatalf("stats %+v", s)
	}
}

// TestRecvLoop checks the loop's batches: every packet arrives intact,
// those in one buffer with their payload left in the shared memory
// (Tail) and those chained over several buffers copied whole; a Close
// from inside the handler ends the loop.
func TestRecvLoop(t *testing.T) {
	srv, cli := pair(t, Config{}, Config{}) // 2048-byte buffers
	sizes := []int{100, 1500, 4000}
	const n = 300
	done := make(chan error, 1)
	got, split := 0, 0
	var bad error
	go func() {
		done <- srv.RecvLoop(make([]link.Packet, 8), func(pkts []link.Packet) {
			for _, p := range pkts {
				want := mkPkt(sizes[got%len(sizes)], byte(got))
				b := append(append([]byte(nil), p.Buf[:p.N]...), p.Tail...)
				switch {
				case bad != nil:
				case p.ICRC != link.ICRCGood || !bytes.Equal(b, want):
					bad = fmt.Errorf("packet %d: ICRC %v, %d bytes, want %d", got, p.ICRC, len(b), len(want))
				case p.Tail != nil && (len(want) > 2048 || p.N != wire.BTHLen):
					bad = fmt.Errorf("packet %d of %d bytes split after %d bytes", got, len(want), p.N)
				case p.Tail != nil:
					split++
				}
				got++
			}
			if got == n {
				srv.Close()
			}
		})
	}()
	for i := range n {
		size := sizes[i%len(sizes)]
		if err := cli.Send([]link.Packet{{Buf: mkPkt(size, byte(i)), N: size, Addr: addrA}}); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-done:
		if !errors.Is(err, link.ErrClosed) || got != n {
			t.Fatalf("RecvLoop: %v after %d", err, got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("RecvLoop did not finish")
	}
	if bad != nil {
		t.Fatal(bad)
	}
	if split != 2*n/3 {
		t.Fatalf("%d packets left in place, want the %d in one buffer", split, 2*n/3)
	}
}

func TestFullRingWaitsThenDrops(t *testing.T) {
	srv, cli := pair(t, Config{}, Config{Log2RingSize: 3, TxWait: 20 * time.Millisecond})
	var pkts []link.Packet
	for i := range 12 {
		pkts = append(pkts, link.Packet{Buf: mkPkt(64, byte(i)), N: 64, Addr: addrA})
	}
	if err := cli.Send(pkts); err != nil {
		t.Fatal(err)
	}
	if s := cli.Stats(); s.Sent != 8 || s.TxDropped != 4 {
		t.Fatalf("stats %+v", s)
	}
	got := recvN(t, srv, 8)
	for i, p := range got {
		if p.Bytes()[wire.BTHLen] != byte(wire.BTHLen)^byte(i) {
			t.Fatalf("packet %d out of order", i)
		}
	}
	// The ring drained: sending works again.
	if err := cli.Send(pkts[:1]); err != nil {
		t.Fatal(err)
	}
	recvN(t, srv, 1)
}

func TestCloseWakesPeer(t *testing.T) {
	srv, cli := pair(t, Config{}, Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := cli.Recv(make([]link.Packet, 4))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	srv.Close()
	select {
	case err := <-errc:
		var de *DisconnectError
		if !errors.As(err, &de) || de.Reason != "interface closed" {
			t.Fatalf("Recv: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("peer's Recv not woken by Close")
	}
	if err := cli.Send([]link.Packet{{Buf: mkPkt(20, 0), N: 20, Addr: addrA}}); err == nil {
		t.Fatal("Send after the peer left succeeded")
	}
	if _, err := srv.Recv(make([]link.Packet, 1)); !errors.Is(err, link.ErrClosed) {
		t.Fatalf("Recv after Close: %v", err)
	}
	if err := srv.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestLocalCloseWakesRecv(t *testing.T) {
	_, cli := pair(t, Config{}, Config{})
	errc := make(chan error, 1)
	go func() {
		_, err := cli.Recv(make([]link.Packet, 4))
		errc <- err
	}()
	time.Sleep(20 * time.Millisecond)
	cli.Close()
	select {
	case err := <-errc:
		if !errors.Is(err, link.ErrClosed) {
			t.Fatalf("Recv: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Recv not woken by Close")
	}
}

func openFDs(t *testing.T) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

func TestNoFDLeak(t *testing.T) {
	before := openFDs(t)
	for range 3 {
		path := sockPath(t)
		ln, err := Listen(path, testSecret, Config{})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan *Link, 1)
		go func() {
			l, _ := ln.Accept()
			done <- l
		}()
		cli, err := Dial(path, testSecret, Config{})
		if err != nil {
			t.Fatal(err)
		}
		srv := <-done
		if err := cli.Send([]link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrA}}); err != nil {
			t.Fatal(err)
		}
		recvN(t, srv, 1)
		cli.Close()
		srv.Close()
		ln.Close()
	}
	if after := openFDs(t); after != before {
		t.Fatalf("%d descriptors open before, %d after", before, after)
	}
}

// TestServerClearsConsumedFlags checks the workaround for DPDK clients
// that leave stale NEXT flags: after the server consumed chained frames,
// no consumed C2S descriptor keeps a flag.
func TestServerClearsConsumedFlags(t *testing.T) {
	srv, cli := pair(t, Config{}, Config{BufferSize: 256, Log2RingSize: 4})
	if err := cli.Send([]link.Packet{{Buf: mkPkt(1000, 1), N: 1000, Addr: addrA}}); err != nil {
		t.Fatal(err)
	}
	recvN(t, srv, 1)
	for i := range int(cli.tx.size) {
		if f := cli.tx.ring.Desc(i).Flags(); f != 0 {
			t.Fatalf("slot %d keeps flags %#x", i, f)
		}
	}
}

func TestConfigChecks(t *testing.T) {
	for _, c := range []Config{{BufferSize: 255}, {BufferSize: 1<<16 + 1}, {Log2RingSize: MaxLog2RingSize + 1}} {
		if _, err := c.withDefaults(); err == nil {
			t.Errorf("%+v accepted", c)
		}
	}
	if maxChain*256 < MaxFrameLen {
		t.Fatal("the longest frame does not fit a chain of the smallest buffers")
	}
	if _, err := Dial(sockPath(t), "", Config{}); err == nil {
		t.Fatal("Dial to a missing socket succeeded")
	}
}
