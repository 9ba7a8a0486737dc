package softroce

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestAckDelay: by default a lone request is acknowledged at once; with
// Config.AckDelay its ACK is held (here for an hour, so only the rules
// that override the delay can release it): a burst of 4 packets is
// acknowledged at once, and closing the responder's QP sends a held ACK.
func TestAckDelay(t *testing.T) {
	write := func(a, b *node, size int) verbs.SendWR {
		return verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, size)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	}
	// A local ACK timeout of hours: no retransmission (whose duplicate
	// would be acknowledged at once) can stand in for the ACK.
	o := pairOpts{timeout: 31}
	t.Run("none", func(t *testing.T) {
		a, b := newPair(t, pipeLinks, pipe.Faults{}, o)
		a.postSend(write(a, b, 64))
		expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	})
	held := o
	held.ackDelay = time.Hour
	t.Run("held-until-close", func(t *testing.T) {
		a, b := newPair(t, pipeLinks, pipe.Faults{}, held)
		a.postSend(write(a, b, 64))
		noWC(t, a.scq, 200*time.Millisecond)
		must(t, b.qp.Close())
		expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	})
	t.Run("burst", func(t *testing.T) {
		a, b := newPair(t, pipeLinks, pipe.Faults{}, held)
		a.postSend(write(a, b, 4*1024)) // 4 packets at MTU 1024
		expectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess)
	})
}

// TestCloseAfterData: an application that sees a WRITE land in its memory
// and closes its device at once still acknowledges it: the receive batch
// that executed the WRITE finishes, ACK included, before the link closes.
func TestCloseAfterData(t *testing.T) {
	for i := range 100 {
		a, b := newPair(t, udpLinks, pipe.Faults{}, pairOpts{retry: 2})
		a.buf[0] = byte(i + 1)
		a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 1)},
			RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		deadline := time.Now().Add(10 * time.Second)
		for atomicByte(b.buf, 0) != byte(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("round %d: the WRITE never landed", i)
			}
		}
		b.dev.Close()
		if wc := waitWC(t, a.scq, 20*time.Second); wc.Status != verbs.WCSuccess {
			t.Fatalf("round %d: %v after the responder closed on seeing the data", i, wc)
		}
		a.dev.Close()
	}
}

// atomicByte loads buf[i] through an atomic load of its aligned word, so
// a polling loop sees what the engine writes (buf is page-aligned).
func atomicByte(buf []byte, i int) byte {
	var w [4]byte
	binary.NativeEndian.PutUint32(w[:], atomic.LoadUint32((*uint32)(unsafe.Pointer(&buf[i&^3]))))
	return w[i&3]
}
