//go:build rdmacore

package rdmacore

import (
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// EnvTestAddr names the local IP whose RoCEv2 GID the device tests use;
// empty means the first device's first IPv4 RoCEv2 GID.
const EnvTestAddr = "RSOCK_RDMACORE_ADDR"

// openTestDevice opens the device the tests run on, or skips the test
// when the host has none.
func openTestDevice(t testing.TB) *Device {
	t.Helper()
	var ip netip.Addr
	if s := os.Getenv(EnvTestAddr); s != "" {
		var err error
		if ip, err = netip.ParseAddr(s); err != nil {
			t.Fatalf("%s=%q: %v", EnvTestAddr, s, err)
		}
	}
	d, err := Open(Config{Addr: ip})
	if errors.Is(err, verbs.ErrNoDevice) {
		t.Skipf("no RDMA device with an active RoCEv2 port (test/rxe/rdmacore.sh runs these in qemu guests with rxe): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("device close: %v", err)
		}
	})
	return d
}

// node is one QP of a loopback pair, with its CQs and a registered
// buffer.
type node struct {
	t        testing.TB
	dev      *Device
	pd       verbs.PD
	scq, rcq verbs.CQ
	qp       verbs.QP
	buf      []byte
	mr       verbs.MR
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

const allAccess = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

func newNode(t testing.TB, d *Device, bufSize int, access verbs.Access) *node {
	t.Helper()
	n := &node{t: t, dev: d}
	var err error
	if n.pd, err = d.AllocPD(); err != nil {
		t.Fatal(err)
	}
	if n.scq, err = d.CreateCQ(512); err != nil {
		t.Fatal(err)
	}
	if n.rcq, err = d.CreateCQ(512); err != nil {
		t.Fatal(err)
	}
	if n.qp, err = n.pd.CreateQP(&verbs.QPInitAttr{SendCQ: n.scq, RecvCQ: n.rcq,
		Cap: verbs.QPCap{MaxSendWR: 256, MaxRecvWR: 256, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInlineData: 64}}); err != nil {
		t.Fatal(err)
	}
	if n.buf, err = verbs.AllocBuffer(bufSize); err != nil {
		t.Fatal(err)
	}
	if n.mr, err = n.pd.RegMR(n.buf, access); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, c := range []interface{ Close() error }{n.qp, n.scq, n.rcq, n.mr, n.pd} {
			if err := c.Close(); err != nil && !errors.Is(err, verbs.ErrClosed) {
				t.Errorf("close: %v", err)
			}
		}
		verbs.FreeBuffer(n.buf)
	})
	return n
}

// connect moves both QPs to RTS aimed at each other over the device's
// own GID (loopback through the device).
func connect(t testing.TB, a, b *node, mtu verbs.MTU, access verbs.Access) {
	t.Helper()
	gid := a.dev.Port().GIDs[0]
	for _, p := range [][2]*node{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: access},
			verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: gid, HopLimit: 64},
			PathMTU: mtu, DestQPN: peer.qp.QPN(), RQPSN: 0xfffff0 + peer.qp.QPN()&3,
			MaxDestRdAtomic: 4, MinRNRTimer: 12},
			verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	}
	for _, me := range []*node{a, b} {
		must(t, me.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 0xfffff0 + me.qp.QPN()&3,
			Timeout: 16, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 4},
			verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	}
}

// vt is the node as the shared operation suite sees it.
func (n *node) vt() *verbstest.Node {
	return &verbstest.Node{QP: n.qp, SendCQ: n.scq, RecvCQ: n.rcq, Buf: n.buf, MR: n.mr}
}

func (n *node) sge(off, length int) verbs.SGE { return n.vt().SGE(off, length) }

func (n *node) postSend(wr verbs.SendWR) {
	n.t.Helper()
	n.vt().PostSend(n.t, wr)
}

func (n *node) postRecv(id uint64, off, length int) {
	n.t.Helper()
	n.vt().PostRecv(n.t, id, off, length)
}

// wcTimeout is generous: the device tests run on rxe in emulated guests.
const wcTimeout = 60 * time.Second

// waitWC returns the next completion of cq, waiting through Wait.
func waitWC(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	return verbstest.WaitWC(t, cq, wcTimeout)
}

func expectWC(t testing.TB, cq verbs.CQ, id uint64, op verbs.WCOpcode, st verbs.WCStatus) verbs.WC {
	t.Helper()
	return verbstest.ExpectWC(t, cq, id, op, st, wcTimeout)
}
