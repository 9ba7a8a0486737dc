package softroce

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// TestMRCloseWaitsForSends: a packet built with its payload in a region
// (link.Packet.Tail) and not yet sent keeps MR.Close from returning, so
// that the memory is not unmapped under the link.
func TestMRCloseWaitsForSends(t *testing.T) {
	a, _ := newPair(t, pipeLinks, noFaults, pairOpts{mtu: verbs.MTU1024})
	m := a.mr.(*MR)
	b := a.dev.txPool.Get().(*txBuffers)
	b.hold(3, m)
	var released atomic.Bool
	go func() {
		time.Sleep(30 * time.Millisecond)
		released.Store(true)
		a.dev.putTx(b)
	}()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if !released.Load() || m.sending.Load() != 0 {
		t.Fatalf("MR.Close returned with %d packets pointing into it", m.sending.Load())
	}
	// A slot taken again lets go of what it held.
	b2 := a.dev.txPool.Get().(*txBuffers)
	m2 := &MR{}
	b2.hold(0, m2)
	b2.hold(0, nil)
	if m2.sending.Load() != 0 || b2.refs != 0 {
		t.Fatalf("after reuse: %d sending, %d refs", m2.sending.Load(), b2.refs)
	}
}
