//go:build linux

package memif

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/memif"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Environment set by testpmd.sh.
const (
	socketsEnv = "MEMIF_TESTPMD_SOCKETS" // "port0.sock port1.sock": testpmd is the server
	listenEnv  = "MEMIF_TESTPMD_LISTEN"  // "port0.sock port1.sock": we are the server
	secretEnv  = "MEMIF_TESTPMD_SECRET"
)

var (
	addrA = netip.MustParseAddrPort("127.0.0.1:4791")
	addrB = netip.MustParseAddrPort("127.0.0.2:4791")
	macA  = wire.MAC{0x02, 0, 0, 0, 0, 1}
	macB  = wire.MAC{0x02, 0, 0, 0, 0, 2}
)

// dial connects to a testpmd memif port, retrying while testpmd starts.
func dial(t *testing.T, path, secret string, cfg memif.Config) *memif.Link {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := memif.Dial(path, secret, cfg)
		if err == nil {
			t.Cleanup(func() { l.Close() })
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("dial %s: %v", path, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// packet returns a RoCEv2 SEND packet of n bytes (BTH and payload)
// carrying seq in its PSN and a pattern derived from seq.
func packet(n int, seq uint32) []byte {
	b := make([]byte, n, n+wire.ICRCLen)
	wire.BTH(b).Encode(&wire.BTHFields{Opcode: wire.RCSendOnly, PKey: wire.DefaultPKey, DestQP: 0x11, PSN: seq})
	for i := wire.BTHLen; i < n; i++ {
		b[i] = byte(uint32(i)*31 + seq)
	}
	return b
}

// receiver collects copies of received packets on a channel.
func receiver(l *memif.Link) (<-chan link.Packet, <-chan error) {
	ch := make(chan link.Packet, 1024)
	errc := make(chan error, 1)
	go func() {
		defer close(ch)
		errc <- l.RecvLoop(make([]link.Packet, 32), func(pkts []link.Packet) {
			for _, p := range pkts {
				// A packet may come in two pieces (its payload left in
				// the shared memory): join them.
				p.Buf = append(append([]byte(nil), p.Bytes()...), p.Tail...)
				p.N, p.Tail = len(p.Buf), nil
				ch <- p
			}
		})
	}()
	return ch, errc
}

// TestTestpmd sends packets both ways through dpdk-testpmd (io
// forwarding between two net_memif server ports) and checks each arrives
// byte-exact with a good ICRC, including frames chained over several
// 2 KiB buffers.
func TestTestpmd(t *testing.T) {
	socks := strings.Fields(os.Getenv(socketsEnv))
	if len(socks) != 2 {
		t.Skipf("%s not set: run test/memif/testpmd.sh", socketsEnv)
	}
	secret := os.Getenv(secretEnv)
	if secret != "" {
		// Until testpmd has started the port, it answers "ID not found".
		deadline := time.Now().Add(20 * time.Second)
		for {
			l, err := memif.Dial(socks[0], "not-"+secret[:min(len(secret), 10)], memif.Config{})
			if l != nil {
				l.Close()
			}
			var de *memif.DisconnectError
			isDE := errors.As(err, &de)
			if isDE && de.Reason == "Incorrect secret" {
				break
			}
			starting := isDE && de.Reason == "ID not found" || errors.Is(err, syscall.ECONNREFUSED)
			if !starting || time.Now().After(deadline) {
				t.Fatalf("dial with a wrong secret: %v", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	a := dial(t, socks[0], secret, memif.Config{Local: addrA, LocalMAC: macA, PeerMAC: macB, Name: "rsock-a"})
	b := dial(t, socks[1], secret, memif.Config{Local: addrB, LocalMAC: macB, PeerMAC: macA, Name: "rsock-b"})
	exchange(t, a, b)
}

// exchange sends packets both ways between a and b, which are joined by
// testpmd, and checks each arrives byte-exact with a good ICRC.
func exchange(t *testing.T, a, b *memif.Link) {
	t.Logf("connected: %s <-> %s", a.PeerName(), b.PeerName())
	chA, errA := receiver(a)
	chB, errB := receiver(b)

	// testpmd drops what arrives before both ports are up: probe until a
	// packet gets through.
	probe := func(from *memif.Link, to netip.AddrPort, ch <-chan link.Packet) {
		deadline := time.Now().Add(20 * time.Second)
		for {
			if err := from.Send([]link.Packet{{Buf: packet(64, 0xffffff), N: 64, Addr: to}}); err != nil {
				t.Fatal(err)
			}
			select {
			case <-ch:
				return
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatal("no packet crossed testpmd")
			}
		}
	}
	probe(a, addrB, chB)
	probe(b, addrA, chA)
	drain := func(ch <-chan link.Packet) {
		for {
			select {
			case <-ch:
			case <-time.After(200 * time.Millisecond):
				return
			}
		}
	}
	drain(chA)
	drain(chB)

	sizes := []int{12, 13, 64, 1000, 1500, 2000, 2048, 2100, 4096 + 28, 4096 + 12 + 16 + 3, 8000}
	const rounds = 200
	const window = 32
	for _, dir := range []struct {
		name     string
		from, to *memif.Link
		ch       <-chan link.Packet
	}{{"a->b", a, b, chB}, {"b->a", b, a, chA}} {
		var bytesOK int
		seq := uint32(0)
		for r := 0; r < rounds; r++ {
			var sent []link.Packet
			for i := range window {
				n := sizes[(r*window+i)%len(sizes)]
				sent = append(sent, link.Packet{Buf: packet(n, seq), N: n, Addr: dir.to.LocalAddr()})
				seq++
			}
			if err := dir.from.Send(sent); err != nil {
				t.Fatal(err)
			}
			for i := range sent {
				var p link.Packet
				select {
				case p = <-dir.ch:
				case <-time.After(5 * time.Second):
					t.Fatalf("%s: round %d: packet %d of %d lost\nsender %+v\n  %s\nreceiver %+v\n  %s", dir.name, r, i, window,
						dir.from.Stats(), dir.from.RingState(), dir.to.Stats(), dir.to.RingState())
				}
				if !bytes.Equal(p.Bytes(), sent[i].Bytes()) || p.ICRC != link.ICRCGood || p.Addr != dir.from.LocalAddr() {
					t.Fatalf("%s: round %d packet %d: %d bytes (want %d), ICRC %v, from %v; PSN %#x", dir.name, r, i,
						p.N, sent[i].N, p.ICRC, p.Addr, binary.BigEndian.Uint32(p.Bytes()[8:])&0xffffff)
				}
				bytesOK += p.N
			}
		}
		t.Logf("%s: %d packets, %d bytes byte-exact with good ICRCs", dir.name, rounds*window, bytesOK)
	}
	a.Close()
	b.Close()
	for _, ec := range []<-chan error{errA, errB} {
		if err := <-ec; err == nil {
			t.Fatal("RecvLoop ended without an error")
		}
	}
	fmt.Fprintf(os.Stderr, "stats a %+v\nstats b %+v\n", a.Stats(), b.Stats())
}

// TestTestpmdClient is TestTestpmd with the roles swapped: our links are
// memif servers and testpmd's two ports connect to them as clients, so
// DPDK creates the shared memory and our side checks and maps it.
func TestTestpmdClient(t *testing.T) {
	socks := strings.Fields(os.Getenv(listenEnv))
	if len(socks) != 2 {
		t.Skipf("%s not set: run test/memif/testpmd.sh", listenEnv)
	}
	secret := os.Getenv(secretEnv)
	cfgs := []memif.Config{
		{Local: addrA, LocalMAC: macA, PeerMAC: macB, Name: "rsock-a", HandshakeTimeout: 30 * time.Second},
		{Local: addrB, LocalMAC: macB, PeerMAC: macA, Name: "rsock-b", HandshakeTimeout: 30 * time.Second},
	}
	type accepted struct {
		i   int
		l   *memif.Link
		err error
	}
	ch := make(chan accepted, 2)
	for i := range 2 {
		ln, err := memif.Listen(socks[i], secret, cfgs[i])
		if err != nil {
			t.Fatal(err)
		}
		// Closing the listener ends a wait for a testpmd that never comes.
		stop := time.AfterFunc(60*time.Second, func() { ln.Close() })
		go func() {
			defer stop.Stop()
			defer ln.Close()
			l, err := ln.Accept()
			ch <- accepted{i, l, err}
		}()
	}
	links := make([]*memif.Link, 2)
	for range 2 {
		r := <-ch
		if r.err != nil {
			t.Fatalf("port %d: %v", r.i, r.err)
		}
		t.Cleanup(func() { r.l.Close() })
		links[r.i] = r.l
	}
	exchange(t, links[0], links[1])
}
