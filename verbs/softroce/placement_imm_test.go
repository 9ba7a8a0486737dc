package softroce

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestWriteImmPlacedAhead: with selective repeat, the last packet of a
// WRITE with immediate (a WRITE ONLY with immediate naming the whole
// message) that arrives past a gap is placed at once, and its receive
// completion waits until the gap fills: under 3% loss, WRITEs with
// immediate of a few packets each complete in order with their own
// immediate and length, their data intact, and the responder leaves no
// packet for its turn (before, each such packet past a gap was dropped
// and sent again).
func TestWriteImmPlacedAhead(t *testing.T) {
	o := pairOpts{selective: true, mtu: verbs.MTU1024, bufSize: 1 << 20, sendWR: 64, recvWR: 64}
	a, b := newPair(t, pipeLinks, pipe.Faults{Loss: 0.03, Seed: 11}, o)
	r := rand.New(rand.NewPCG(5, 6))
	const slots, slot = 16, 8 << 10
	sizes := map[uint64]int{}
	post := func(id uint64) {
		off := int(id%slots) * slot
		size := 1 + r.IntN(slot)
		verbstest.FillRandom(r, a.buf[off:off+size])
		sizes[id] = size
		b.postRecv(id, 0, 0)
		a.postSend(verbs.SendWR{ID: id, Opcode: verbs.WRRDMAWriteWithImm, Imm: uint32(id) ^ 0xabcd,
			SGL: []verbs.SGE{a.sge(off, size)}, RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()})
	}
	const total = 600
	next := uint64(1)
	for ; next <= slots/2; next++ {
		post(next)
	}
	for done := uint64(1); done <= total; done++ {
		wc := waitWC(t, b.rcq, 30*time.Second)
		if wc.WRID != done || wc.Status != verbs.WCSuccess || wc.Opcode != verbs.WCRecvRDMAWithImm ||
			wc.Flags&verbs.WCWithImm == 0 || wc.Imm != uint32(done)^0xabcd || wc.ByteLen != uint32(sizes[done]) {
			t.Fatalf("receive completion %+v, want WRITE %d in order, immediate %#x, %d bytes", wc, done, uint32(done)^0xabcd, sizes[done])
		}
		expectWC(t, a.scq, done, verbs.WCRDMAWrite, verbs.WCSuccess)
		off := int(done%slots) * slot
		if !bytes.Equal(a.buf[off:off+sizes[done]], b.buf[off:off+sizes[done]]) {
			t.Fatalf("WRITE %d: data differs", done)
		}
		if next <= total {
			post(next)
			next++
		}
	}
	ca, cb := a.dev.Counters(), b.dev.Counters()
	t.Logf("requester: %d resent; responder: %d placed out of order, %d left for their turn, %d duplicates",
		ca.Retransmits, cb.OutOfOrder, cb.OutOfSequence, cb.Duplicates)
	if ca.Retransmits == 0 || cb.OutOfOrder == 0 {
		t.Fatalf("loss did not open gaps: %d resent, %d placed out of order", ca.Retransmits, cb.OutOfOrder)
	}
	if cb.OutOfSequence != 0 {
		t.Errorf("the responder left %d packets for their turn; every packet of a WRITE can be placed past a gap", cb.OutOfSequence)
	}
}
