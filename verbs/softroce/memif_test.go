//go:build linux

package softroce

import (
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/memif"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// The memif link runs the tests that run over every kind of link: its
// receive loop hands the engine packets whose payload stays in the shared
// memory (link.Packet.Tail), with 4224-byte buffers as netconn uses, so
// every frame up to MTU 4096 arrives that way.
func init() { extraLinks = append(extraLinks, memifLinks) }

var memifLinks = linkKind{"memif", func(t testing.TB, _ pipe.Faults) (link.Link, link.Link) {
	dir, err := os.MkdirTemp(t.TempDir(), "m")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "memif.sock")
	const secret = "softroce-tests"
	macA, macB := wire.MAC{2, 0, 0, 0, 0, 1}, wire.MAC{2, 0, 0, 0, 0, 2}
	ln, err := memif.Listen(path, secret, memif.Config{Local: netip.MustParseAddrPort("192.0.2.1:4791"),
		LocalMAC: macA, PeerMAC: macB})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	type accepted struct {
		l   *memif.Link
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		l, err := ln.Accept()
		ch <- accepted{l, err}
	}()
	b, err := memif.Dial(path, secret, memif.Config{Local: netip.MustParseAddrPort("192.0.2.2:4791"),
		LocalMAC: macB, PeerMAC: macA, BufferSize: 4224})
	a := <-ch
	if err != nil || a.err != nil {
		if b != nil {
			b.Close()
		}
		if a.l != nil {
			a.l.Close()
		}
		t.Fatalf("memif: dial %v, accept %v", err, a.err)
	}
	return a.l, b
}}

// TestCaptureMemif captures over the memif link, whose received packets
// come in two pieces: every packet is in the file whole, and every
// frame's ICRC verifies.
func TestCaptureMemif(t *testing.T) { captureWrite(t, memifLinks, verbs.MTU4096) }

// TestMemifSendsFromRegion: over memif (a link.TailSender) the data
// packets of a WRITE leave their payload in the registered memory, and
// once the WRITE completes no packet points into it.
func TestMemifSendsFromRegion(t *testing.T) {
	a, b := newPair(t, memifLinks, noFaults, pairOpts{mtu: verbs.MTU4096})
	if !a.dev.tailSend {
		t.Fatal("the memif link is not used as a TailSender")
	}
	const size = 1 << 20
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, size)},
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	if got, want := b.mr.(*MR).buf[:size], a.mr.(*MR).buf[:size]; string(got) != string(want) {
		t.Fatal("the WRITE's bytes differ")
	}
	deadline := time.Now().Add(5 * time.Second)
	for a.mr.(*MR).sending.Load() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d packets still point into the region", a.mr.(*MR).sending.Load())
		}
		time.Sleep(time.Millisecond)
	}
}
