package softroce

import (
	"fmt"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// TestOperations runs every operation end to end between two devices, at
// message sizes around the path MTU and up to 1 MiB (the suite every
// provider passes, internal/verbstest).
func TestOperations(t *testing.T) {
	for _, k := range append([]linkKind{pipeLinks, udpLinks}, extraLinks...) {
		for _, mtu := range []verbs.MTU{verbs.MTU256, verbs.MTU1024, verbs.MTU4096} {
			t.Run(fmt.Sprintf("%s/mtu%v", k.name, mtu), func(t *testing.T) {
				const big = 1 << 20
				o := pairOpts{mtu: mtu, bufSize: 2 * big}
				a, b := newPair(t, k, pipe.Faults{}, o)
				verbstest.Operations(t, a.vt(), b.vt(), mtu, big, wcTimeout)
				if c := a.dev.Counters(); c.ICRCErrors+c.Malformed+c.WrongPeer != 0 {
					t.Errorf("unexpected error counters: %+v", c)
				}
			})
		}
	}
}

// wcTimeout bounds each wait for a completion in the tests.
const wcTimeout = 20 * time.Second

// TestForeignRKey: an rkey of a region in another PD of the same device
// (another connection's ring) fails the requester with a remote access
// error (internal/verbstest).
func TestForeignRKey(t *testing.T) {
	for _, selective := range []bool{false, true} {
		t.Run(fmt.Sprintf("selective=%v", selective), func(t *testing.T) {
			verbstest.ForeignRKey(t, func(t *testing.T) (*verbstest.Node, *verbstest.Node, verbs.MR) {
				a, b := newPair(t, pipeLinks, pipe.Faults{}, pairOpts{selective: selective})
				pd, err := b.dev.AllocPD()
				must(t, err)
				buf, err := verbs.AllocBuffer(4096)
				must(t, err)
				t.Cleanup(func() { verbs.FreeBuffer(buf) })
				all := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
				other, err := pd.RegMR(buf, all)
				must(t, err)
				return a.vt(), b.vt(), other
			}, wcTimeout)
		})
	}
}
