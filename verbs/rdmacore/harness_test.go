//go:build rdmacore

package rdmacore

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"

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

func (n *node) sge(off, length int) verbs.SGE {
	return verbs.SGE{Addr: n.mr.Addr() + uint64(off), Length: uint32(length), LKey: n.mr.LKey()}
}

func (n *node) postSend(wr verbs.SendWR) {
	n.t.Helper()
	wr.Flags |= verbs.SendSignaled
	if _, err := n.qp.PostSend([]verbs.SendWR{wr}); err != nil {
		n.t.Fatal(err)
	}
}

func (n *node) postRecv(id uint64, off, length int) {
	n.t.Helper()
	if _, err := n.qp.PostRecv([]verbs.RecvWR{{ID: id, SGL: []verbs.SGE{n.sge(off, length)}}}); err != nil {
		n.t.Fatal(err)
	}
}

// wcTimeout is generous: the device tests run on rxe in emulated guests.
const wcTimeout = 60 * time.Second

// waitWC returns the next completion of cq, waiting through Wait.
func waitWC(t testing.TB, cq verbs.CQ) verbs.WC {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
	defer cancel()
	var wc [1]verbs.WC
	for {
		n, err := cq.Poll(wc[:])
		if err != nil {
			t.Fatalf("poll: %v", err)
		}
		if n == 1 {
			return wc[0]
		}
		if err := cq.Wait(ctx); err != nil {
			t.Fatalf("no completion within %v: %v", wcTimeout, err)
		}
	}
}

func expectWC(t testing.TB, cq verbs.CQ, id uint64, op verbs.WCOpcode, st verbs.WCStatus) verbs.WC {
	t.Helper()
	wc := waitWC(t, cq)
	if wc.WRID != id || wc.Opcode != op || wc.Status != st {
		t.Fatalf("got %v, want id=%d %v %v", wc, id, op, st)
	}
	return wc
}
