package softroce

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// TestSACKBytesFor: without wide SACK the bitmap is the 128 bytes every
// peer knows, at every MTU; with it, the largest power of two that a
// selective NAK's payload of the path MTU holds after the header, up to
// 512 bytes.
func TestSACKBytesFor(t *testing.T) {
	for _, tc := range []struct {
		mtu  int
		wide bool
		want int
	}{
		{256, false, 128}, {1024, false, 128}, {4096, false, 128},
		{256, true, 128}, // 4+256 bytes would not fit
		{512, true, 256},
		{1024, true, 512},
		{2048, true, 512}, {4096, true, 512},
	} {
		got := sackBytesFor(tc.mtu, tc.wide)
		if got != tc.want {
			t.Errorf("sackBytesFor(%d, wide %v) = %d, want %d", tc.mtu, tc.wide, got, tc.want)
		}
		if tc.wide && wire.SACKHeaderLen+got > tc.mtu {
			t.Errorf("MTU %d: a %d-byte bitmap and its header exceed the payload", tc.mtu, got)
		}
	}
}

// TestWindowFor: go-back-N keeps the device's bound (512 by default) and
// ignores the user's; selective repeat takes half the bitmap's PSNs,
// bounded by the device's MaxInflight and the user's limit when set.
func TestWindowFor(t *testing.T) {
	for _, tc := range []struct {
		name                   string
		sack, devMax, limit, w int
	}{
		{"go-back-N default", 0, 0, 0, 512},
		{"go-back-N device bound", 0, 1000, 0, 1000},
		{"go-back-N ignores the limit", 0, 0, 100, 512},
		{"narrow", 128, 0, 0, 512},
		{"narrow, larger ring", 128, 0, 4224, 512},
		{"narrow, small ring", 128, 0, 200, 200},
		{"wide at MTU 512", 256, 0, 0, 1024},
		{"wide", 512, 0, 0, 2048},
		{"wide, device bound", 512, 512, 0, 512},
		{"wide, default ring", 512, 0, 640, 640},
		{"wide, 4 MiB ring", 512, 0, 4224, 2048},
	} {
		if got := windowFor(tc.sack, tc.devMax, tc.limit); got != tc.w {
			t.Errorf("%s: windowFor(%d, %d, %d) = %d, want %d", tc.name, tc.sack, tc.devMax, tc.limit, got, tc.w)
		}
	}
}

// TestWindowWithinBitmap: whatever the MTU, SACK width and limits, the
// requester's window is at most half the PSNs the responder's bitmap
// tells apart, and the PSNs it may have in flight (fewer than its
// scoreboard covers) stay inside that bitmap, so that no set bit stands
// for two PSNs in flight.
func TestWindowWithinBitmap(t *testing.T) {
	for _, mtu := range []int{256, 512, 1024, 2048, 4096} {
		for _, wide := range []bool{false, true} {
			for _, devMax := range []int{0, 100, 512, 3000, maxInflightLimit} {
				for _, limit := range []int{0, 64, 640, 4224, maxInflightLimit} {
					sack := sackBytesFor(mtu, wide)
					bitmap := 8 * sack
					w := windowFor(sack, devMax, limit)
					sb := scoreboardSize(w, sack)
					if w > bitmap/2 || sb > bitmap || sb <= w || sb&(sb-1) != 0 {
						t.Errorf("MTU %d wide %v device %d limit %d: window %d, scoreboard %d, bitmap %d PSNs",
							mtu, wide, devMax, limit, w, sb, bitmap)
					}
				}
			}
		}
	}
	// The bound is real: a bitmap cannot tell a PSN from one a window on.
	var b recvBitmap
	b.init(4096)
	b.set(7)
	if !b.has(7 + 4096) {
		t.Fatal("the bitmap told apart PSNs a window apart; the test of the bound is wrong")
	}
}

// TestWideSACKPlacement: the responder places a WRITE ONLY up to its
// bitmap's last PSN past the gap and no further, and its selective NAK
// describes it in a bitmap no longer than its SACK width (128 bytes
// without wide SACK) and a payload no longer than the path MTU.
func TestWideSACKPlacement(t *testing.T) {
	for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU512, verbs.MTU1024, verbs.MTU4096} {
		for _, wide := range []bool{false, true} {
			t.Run(fmt.Sprintf("%v/wide=%v", mtu.Bytes(), wide), func(t *testing.T) {
				ft := newFuzzTarget(t)
				ft.selective, ft.wide, ft.mtu = true, wide, mtu
				ft.reset(t)
				peer := ft.peerLink(t)
				sack := sackBytesFor(mtu.Bytes(), wide)
				window := uint32(8 * sack)
				const epsn = 0x100
				c0 := ft.n.dev.Counters()
				ft.inject(ft.writeOnly(epsn+window, 0, []byte{1, 2, 3, 4}), ft.peer)
				c1 := ft.n.dev.Counters()
				if c1.OutOfOrder != c0.OutOfOrder || c1.OutOfSequence != c0.OutOfSequence+1 {
					t.Fatalf("a WRITE a whole bitmap past the gap: placed %d, out of sequence %d; want 0, 1",
						c1.OutOfOrder-c0.OutOfOrder, c1.OutOfSequence-c0.OutOfSequence)
				}
				ft.inject(ft.writeOnly(epsn+window-1, 0, []byte{5, 6, 7, 8}), ft.peer)
				if c := ft.n.dev.Counters(); c.OutOfOrder != c1.OutOfOrder+1 {
					t.Fatalf("the WRITE at the bitmap's last PSN was not placed: %+v", c)
				}
				if got := ft.remoteBytes(0, 4); !bytes.Equal(got, []byte{5, 6, 7, 8}) {
					t.Fatalf("remote memory %v", got)
				}
				naks := recvSelectiveNAKs(t, peer, 100*time.Millisecond)
				if len(naks) == 0 {
					t.Fatal("no selective NAK")
				}
				nak := naks[len(naks)-1]
				bm := wire.SACKInfo(nak.Payload).Bitmap()
				if len(nak.Payload) > mtu.Bytes() || len(bm) != sack {
					t.Fatalf("selective NAK: payload %d bytes, bitmap %d; want a %d-byte bitmap within a %d-byte MTU",
						len(nak.Payload), len(bm), sack, mtu.Bytes())
				}
				n := bm.BitsWithin(sack)
				if i := bm.NextSet(0, n); i != int(window)-2 || bm.NextSet(i+1, n) != -1 {
					t.Fatalf("bitmap names bit %d, want only %d", i, window-2)
				}
				ft.check(t)
			})
		}
	}
}

// recvSelectiveNAKs reads packets at l until none comes for quiet, and
// returns the selective NAKs.
func recvSelectiveNAKs(t *testing.T, l link.Link, quiet time.Duration) []wire.Packet {
	t.Helper()
	var got []wire.Packet
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]link.Packet, 64)
		for i := range buf {
			buf[i].Buf = make([]byte, maxPacketLen+wire.ICRCLen)
		}
		for {
			n, err := l.Recv(buf)
			if err != nil {
				return
			}
			for _, p := range buf[:n] {
				pkt, err := wire.Parse(append([]byte(nil), p.Bytes()...))
				if err == nil && pkt.BTH.Opcode() == wire.RCSelectiveNAK {
					got = append(got, pkt)
				}
			}
		}
	}()
	time.Sleep(quiet)
	l.Close()
	<-done
	return got
}

// FuzzWideResponder is FuzzResponder for a QP with wide SACK at a
// 1024-byte path MTU, whose bitmap tracks 4096 PSNs, with a gap already
// open so that the bitmap is in use; seeds place WRITEs near and past its
// far end. Nothing may panic, and no byte outside the MR registered for
// remote access may change.
func FuzzWideResponder(f *testing.F) {
	ft := newFuzzTarget(f)
	ft.selective, ft.wide, ft.mtu = true, true, verbs.MTU1024
	seeds := ft.seedPackets()
	for _, d := range []uint32{1, 1023, 1024, 2047, 4095, 4096, 1 << 23} {
		seeds = append(seeds, ft.writeOnly(0x100+d, 0, []byte{1, 2, 3, 4}))
	}
	for _, p := range seeds {
		f.Add(p, false)
		f.Add(p, true)
	}
	f.Fuzz(func(t *testing.T, pkt []byte, twice bool) {
		ft.reset(t)
		ft.inject(ft.writeOnly(0x102, 8, []byte{9, 9, 9, 9}), ft.peer) // past the gap at 0x100
		ft.inject(pkt, ft.peer)
		if twice {
			ft.inject(pkt, ft.peer)
		}
		ft.check(t)
	})
}
