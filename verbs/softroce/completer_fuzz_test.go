package softroce

import (
	"bytes"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// FuzzCompleter feeds one arbitrary response, from the peer's address, to
// a QP with a WRITE outstanding, through the whole receive path. The
// input's first byte picks the loss-recovery mode (bit 0 selective
// repeat, bit 1 with it wide SACK), the next three a PSN
// offset from the oldest outstanding PSN, and the rest is the packet
// (BTH onward), whose destination QP and PSN are set. Whatever the input,
// the QP must not panic; a response outside the outstanding range must
// leave the completer as it was, and the WRITE must then succeed once the
// wire is mended.
func FuzzCompleter(f *testing.F) {
	for k := range numRespKinds {
		for _, off := range []uint32{0, 1, 3, 5, 100, wire.PSNMask, wire.PSNMask - 7, 1 << 23} {
			in := []byte{byte(k) & 1, byte(off >> 16), byte(off >> 8), byte(off)}
			f.Add(append(in, forgeResponse(k, 0, 0)...))
		}
	}
	// Selective NAKs with the bitmaps of wide SACK, and longer, to wide
	// and narrow readers.
	for _, bitmap := range []int{wire.MaxSACKBytes + 4, 256, wire.MaxWideSACKBytes, wire.MaxWideSACKBytes + 64, 1000} {
		nak := forgeResponse(respSelectiveNAK, 0, 0)
		h := wire.BTHLen + wire.AETHLen + wire.SACKHeaderLen
		nak = append(nak[:h], bytes.Repeat([]byte{0xa5}, bitmap)...)
		for _, mode := range []byte{1, 3} {
			for _, off := range []uint32{0, 1, wire.PSNMask} {
				f.Add(append([]byte{mode, byte(off >> 16), byte(off >> 8), byte(off)}, nak...))
			}
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) < 4+wire.BTHLen {
			return
		}
		a, b, mend := stalledPairWide(t, in[0]&1 != 0, in[0]&2 != 0)
		before := viewCompleter(a.qp)
		psn := psnAdd(before.acked, 1+(uint32(in[1])<<16|uint32(in[2])<<8|uint32(in[3])))
		pkt := append([]byte(nil), in[4:]...)
		wire.BTH(pkt).SetDestQP(a.qp.QPN())
		wire.BTH(pkt).SetPSN(psn)
		buf := make([]byte, len(pkt), len(pkt)+wire.ICRCLen)
		copy(buf, pkt)
		outside := !a.qp.outstandingLocked(psn)
		a.dev.rx.batch([]link.Packet{{Buf: buf, N: len(pkt), Addr: b.dev.LocalAddr(), ICRC: link.ICRCGood}})
		if !outside {
			// An in-range response is believed, whatever it says: a
			// forged ACK of a PSN that never arrived can cost the
			// connection its retries. Only a panic fails here.
			return
		}
		if after := viewCompleter(a.qp); after != before {
			t.Fatalf("a packet at PSN %#x, outside the outstanding range, moved the completer:\n%+v\nto\n%+v", psn, before, after)
		}
		mend()
		expectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCSuccess)
	})
}

// outstandingLocked is outstanding for a caller that does not hold q.mu.
func (q *QP) outstandingLocked(psn uint32) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.outstanding(psn)
}
