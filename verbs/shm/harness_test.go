//go:build linux

package shm

import (
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// wcTimeout bounds each wait for a completion in the tests.
const wcTimeout = 20 * time.Second

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// node is one side of a test connection: a QP with its CQs and one
// registered buffer on a device.
type node struct {
	dev *Device
	pd  verbs.PD
	scq verbs.CQ
	rcq verbs.CQ
	qp  verbs.QP
	buf []byte
	mr  verbs.MR
	// close releases the node; tests that release it early replace it.
	close func(testing.TB)
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// newNode makes a QP in RESET with a buffer of size bytes registered with
// access.
func newNode(t testing.TB, d *Device, size int, access verbs.Access) *node {
	t.Helper()
	n := &node{dev: d}
	var err error
	n.pd, err = d.AllocPD()
	must(t, err)
	n.scq, err = d.CreateCQ(4096)
	must(t, err)
	n.rcq, err = d.CreateCQ(4096)
	must(t, err)
	n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 4, MaxRecvSGE: 4}})
	must(t, err)
	n.buf, err = verbs.AllocBuffer(size)
	must(t, err)
	n.mr, err = n.pd.RegMR(n.buf, access)
	must(t, err)
	n.close = n.release
	t.Cleanup(func() { n.close(t) })
	return n
}

func (n *node) release(t testing.TB) {
	for _, err := range []error{n.qp.Close(), n.scq.Close(), n.rcq.Close(), n.mr.Close(), n.pd.Close(), verbs.FreeBuffer(n.buf)} {
		if err != nil {
			t.Errorf("close: %v", err)
		}
	}
}

// connect moves both QPs to RTS, each aimed at the other.
func connect(t testing.TB, a, b *node, access verbs.Access) {
	t.Helper()
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: access},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: me.dev.Port().GIDs[0]},
			PathMTU: verbs.MTU4096, DestQPN: peer.qp.QPN(), MaxDestRdAtomic: 16, MinRNRTimer: 1},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	}
	for _, n := range []*node{a, b} {
		must(t, n.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
}

// newPair opens two devices joined by a channel in this process.
func newPair(t testing.TB) (*Device, *Device) {
	t.Helper()
	a, b, err := Pair(Config{MaxQPs: 64})
	must(t, err)
	t.Cleanup(func() {
		must(t, a.Close())
		must(t, b.Close())
	})
	return a, b
}

// vt is the node as the shared operation suite sees it.
func (n *node) vt() *verbstest.Node {
	return &verbstest.Node{QP: n.qp, SendCQ: n.scq, RecvCQ: n.rcq, Buf: n.buf, MR: n.mr}
}
