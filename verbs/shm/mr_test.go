//go:build linux

package shm

import (
	"bytes"
	"errors"
	"testing"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// TestMRCloseRevokes: once an MR is closed, the peer's writes no longer
// reach the memory, even a peer that keeps its mapping (here: pinned);
// Close keeps the contents, CloseDiscard does not copy them back.
func TestMRCloseRevokes(t *testing.T) {
	for _, discard := range []bool{false, true} {
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a, b, allAccess)
		copy(a.buf, "hello")
		a.vt().PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.vt().SGE(0, 5)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		verbstest.ExpectWC(t, a.scq, 1, verbs.WCRDMAWrite, verbs.WCSuccess, wcTimeout)
		a.dev.mu.Lock()
		r := a.dev.peerMRs[b.mr.RKey()]
		a.dev.mu.Unlock()
		if r == nil || !r.acquire() {
			t.Fatal("no mapping of the peer's region")
		}
		if discard {
			must(t, b.mr.(*MR).CloseDiscard())
		} else {
			must(t, b.mr.Close())
		}
		copy(r.mem, "evil!")
		r.release()
		want := []byte("hello")
		if discard {
			want = make([]byte, 5)
		}
		if got := b.buf[:5]; !bytes.Equal(got, want) {
			t.Fatalf("discard=%v: after Close the region holds %q, want %q", discard, got, want)
		}
		// Once the peer read the channel, its next write fails: the key
		// is gone. (A write racing the Close lands in the memfd only.)
		must(t, a.dev.sync())
		a.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.vt().SGE(0, 5)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		verbstest.ExpectWC(t, a.scq, 2, verbs.WCRDMAWrite, verbs.WCRemAccessErr, wcTimeout)
	}
}

// TestRegMRNeedsAllocBuffer: remote access is refused for memory that is
// not from verbs.AllocBuffer (the Go heap: remapping it would hand Go's
// memory to the peer) or does not start a page.
func TestRegMRNeedsAllocBuffer(t *testing.T) {
	da, _ := newPair(t)
	pd, err := da.AllocPD()
	must(t, err)
	heap := make([]byte, 1<<20)
	if _, err := pd.RegMR(heap, allAccess); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("Go heap memory: %v", err)
	}
	buf, err := verbs.AllocBuffer(1 << 16)
	must(t, err)
	defer verbs.FreeBuffer(buf)
	if _, err := pd.RegMR(buf[8:], allAccess); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("memory not starting a page: %v", err)
	}
	m, err := pd.RegMR(heap, verbs.AccessLocalWrite)
	must(t, err)
	must(t, m.Close())
}
