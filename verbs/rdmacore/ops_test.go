//go:build rdmacore

package rdmacore

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// TestOperations runs every operation between two QPs of the device (a
// loopback through it), at sizes around the path MTU and up to 1 MiB.
func TestOperations(t *testing.T) {
	d := openTestDevice(t)
	t.Logf("device %s, GID %v, active MTU %v", d.Name(), d.Port().GIDs[0], d.Port().ActiveMTU)
	if d.Name() == "" || d.Provider() != ProviderName || d.Link() != LinkName {
		t.Fatalf("device %s: provider %q link %q", d.Name(), d.Provider(), d.Link())
	}
	mtus := []verbs.MTU{verbs.MTU1024}
	if am := d.Port().ActiveMTU; am != verbs.MTU1024 {
		mtus = append(mtus, am)
	}
	for _, mtu := range mtus {
		t.Run(fmt.Sprintf("mtu%v", mtu), func(t *testing.T) {
			const big = 1 << 20
			a, b := newNode(t, d, 2*big, allAccess), newNode(t, d, 2*big, allAccess)
			connect(t, a, b, mtu, allAccess)
			verbstest.Operations(t, a.vt(), b.vt(), mtu, big, wcTimeout)
			t.Run("inline", func(t *testing.T) {
				msg := []byte("inline data is copied at post time")
				copy(a.buf, msg)
				b.postRecv(900, 0, 64)
				a.postSend(verbs.SendWR{ID: 900, Opcode: verbs.WRSend, Flags: verbs.SendInline, SGL: []verbs.SGE{a.sge(0, len(msg))}})
				clear(a.buf[:len(msg)]) // after the post: the device already has the bytes
				expectWC(t, a.scq, 900, verbs.WCSend, verbs.WCSuccess)
				expectWC(t, b.rcq, 900, verbs.WCRecv, verbs.WCSuccess)
				if !bytes.Equal(b.buf[:len(msg)], msg) {
					t.Fatalf("inline send delivered %q", b.buf[:len(msg)])
				}
			})
			t.Run("batch", func(t *testing.T) { testBatch(t, a, b) })
		})
	}
}

// testBatch posts 100 receives and 100 sends (two SGEs each, the last
// one signaled only) in one call each, and polls the receives in batches:
// the completions come back in order with their ids and lengths.
func testBatch(t *testing.T, a, b *node) {
	const n = 100
	rwrs := make([]verbs.RecvWR, n)
	swrs := make([]verbs.SendWR, n)
	for i := range n {
		rwrs[i] = verbs.RecvWR{ID: uint64(1000 + i), SGL: []verbs.SGE{b.sge(i*64, 32), b.sge(n*64+i*64, 32)}}
		binary.BigEndian.PutUint32(a.buf[i*8:], uint32(i))
		binary.BigEndian.PutUint32(a.buf[4096+i*8:], uint32(^i))
		swrs[i] = verbs.SendWR{ID: uint64(2000 + i), Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(i*8, 4), a.sge(4096+i*8, 4)}}
	}
	swrs[n-1].Flags = verbs.SendSignaled
	if k, err := b.qp.PostRecv(rwrs); k != n || err != nil {
		t.Fatalf("PostRecv posted %d: %v", k, err)
	}
	if k, err := a.qp.PostSend(swrs); k != n || err != nil {
		t.Fatalf("PostSend posted %d: %v", k, err)
	}
	// Unsignaled sends complete silently: only the last one shows.
	expectWC(t, a.scq, 2000+n-1, verbs.WCSend, verbs.WCSuccess)
	wcs := make([]verbs.WC, 16)
	got := 0
	ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
	defer cancel()
	for got < n {
		k, err := b.rcq.Poll(wcs)
		if err != nil {
			t.Fatal(err)
		}
		for _, wc := range wcs[:k] {
			if wc.WRID != uint64(1000+got) || wc.Status != verbs.WCSuccess || wc.ByteLen != 8 {
				t.Fatalf("completion %d: %v", got, wc)
			}
			first := binary.BigEndian.Uint32(b.buf[got*64:])
			if first != uint32(got) {
				t.Fatalf("receive %d holds %d", got, first)
			}
			got++
		}
		if k == 0 {
			if err := b.rcq.Wait(ctx); err != nil {
				t.Fatalf("%d of %d receives: %v", got, n, err)
			}
		}
	}
	noMore(t, a.scq)
}

// noMore checks that a CQ holds no further completion.
func noMore(t *testing.T, cq verbs.CQ) {
	t.Helper()
	var wc [1]verbs.WC
	if n, err := cq.Poll(wc[:]); n != 0 || err != nil {
		t.Fatalf("unexpected completion %v (%v)", wc[0], err)
	}
}

// TestStateMachine checks the transitions rdmacore shares with soft-RoCE
// and what a QP allows in each state.
func TestStateMachine(t *testing.T) {
	d := openTestDevice(t)
	a, b := newNode(t, d, 1<<16, allAccess), newNode(t, d, 1<<16, allAccess)
	if s := a.qp.State(); s != verbs.QPSReset {
		t.Fatalf("new QP in %v", s)
	}
	// RESET→RTR skips INIT.
	err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState)
	var te *verbs.TransitionError
	if !errors.As(err, &te) || !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET→RTR: %v", err)
	}
	// RESET→INIT without the port.
	if err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit}, verbs.AttrState|verbs.AttrAccessFlags|verbs.AttrPKeyIndex); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET→INIT without port: %v", err)
	}
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	// Receives may be posted from INIT; sends not before RTS.
	a.postRecv(1, 0, 64)
	if _, err := a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 8)}}}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostSend in INIT: %v", err)
	}
	// A peer on another UDP port than 4791 is out of a device's reach.
	rtr := verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: d.Port().GIDs[0], DPort: 5000}, PathMTU: verbs.MTU1024,
		DestQPN: b.qp.QPN(), RQPSN: 77, MaxDestRdAtomic: 1, MinRNRTimer: 12}
	rtrMask := verbs.AttrState | verbs.AttrAV | verbs.AttrPathMTU | verbs.AttrDestQPN | verbs.AttrRQPSN | verbs.AttrMaxDestRdAtomic | verbs.AttrMinRNRTimer
	if err := a.qp.Modify(&rtr, rtrMask); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("RTR toward UDP port 5000: %v", err)
	}
	rtr.AH.DPort = 0
	rtr.AH.SGIDIndex = uint8(len(d.Port().GIDs))
	if err := a.qp.Modify(&rtr, rtrMask); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("RTR with an SGID index past the table: %v", err)
	}
	rtr.AH.SGIDIndex = 0
	must(t, a.qp.Modify(&rtr, rtrMask))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: 99, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 1},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	q := a.qp.Query()
	if q.State != verbs.QPSRTS || q.DestQPN != b.qp.QPN() || q.RQPSN != 77 || q.SQPSN != 99 || q.PathMTU != verbs.MTU1024 ||
		q.AH.DGID != d.Port().GIDs[0] || q.AH.SGIDIndex != 0 || q.Timeout != 14 {
		t.Fatalf("Query after RTS: %+v", q)
	}
	// RTS→RTR goes backwards.
	if err := a.qp.Modify(&rtr, rtrMask); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RTS→RTR: %v", err)
	}
	// ERR flushes the posted receive.
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState))
	wc := waitWC(t, a.rcq)
	if wc.WRID != 1 || wc.Status != verbs.WCWRFlushErr {
		t.Fatalf("after ERR: %v, want id 1 flushed", wc)
	}
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSReset}, verbs.AttrState))
	if s := a.qp.State(); s != verbs.QPSReset {
		t.Fatalf("after RESET: %v", s)
	}
}

// TestRemoteAccessError writes to a region the peer did not open for
// remote writes: the requester's completion fails with a remote access
// error and its QP goes to ERR, as with soft-RoCE.
func TestRemoteAccessError(t *testing.T) {
	d := openTestDevice(t)
	a := newNode(t, d, 1<<16, allAccess)
	b := newNode(t, d, 1<<16, verbs.AccessLocalWrite|verbs.AccessRemoteRead)
	connect(t, a, b, verbs.MTU1024, allAccess)
	a.postSend(verbs.SendWR{ID: 5, Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.sge(0, 64)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
	wc := waitWC(t, a.scq)
	if wc.WRID != 5 || wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("write without remote write access: %v, want remote access error", wc)
	}
	if s := a.qp.State(); s != verbs.QPSErr {
		t.Fatalf("requester in %v after the error, want ERR", s)
	}
	// A wrong rkey fails the same way.
	a2, b2 := newNode(t, d, 1<<16, allAccess), newNode(t, d, 1<<16, allAccess)
	connect(t, a2, b2, verbs.MTU1024, allAccess)
	a2.postSend(verbs.SendWR{ID: 6, Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a2.sge(0, 64)}, RemoteAddr: b2.mr.Addr(), RKey: b2.mr.RKey() ^ 0x5a5a00})
	if wc := waitWC(t, a2.scq); wc.WRID != 6 || wc.Status != verbs.WCRemAccessErr {
		t.Fatalf("read with a wrong rkey: %v, want remote access error", wc)
	}
}

// TestCQWaitNotify checks the completion channel: Wait times out on an
// empty CQ, a completion wakes both Wait and Notify through the runtime
// poller, and Close ends a Wait in progress.
func TestCQWaitNotify(t *testing.T) {
	d := openTestDevice(t)
	a, b := newNode(t, d, 1<<16, allAccess), newNode(t, d, 1<<16, allAccess)
	connect(t, a, b, verbs.MTU1024, allAccess)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	err := b.rcq.Wait(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait on an empty CQ: %v", err)
	}
	// Drain stale tokens, then a completion must bring a fresh one.
	for len(b.rcq.Notify()) > 0 {
		<-b.rcq.Notify()
	}
	b.postRecv(1, 0, 64)
	a.postSend(verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.sge(0, 16)}})
	select {
	case <-b.rcq.Notify():
	case <-time.After(wcTimeout):
		t.Fatal("no Notify token for a completion")
	}
	expectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCSuccess)
	expectWC(t, a.scq, 1, verbs.WCSend, verbs.WCSuccess)

	// Close ends a Wait in progress with ErrClosed (a CQ no QP uses).
	cq, err := d.CreateCQ(16)
	must(t, err)
	done := make(chan error, 1)
	go func() { done <- cq.Wait(context.Background()) }()
	time.Sleep(20 * time.Millisecond)
	must(t, cq.Close())
	select {
	case err := <-done:
		if !errors.Is(err, verbs.ErrClosed) {
			t.Fatalf("Wait ended with %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Close did not end Wait")
	}
	if _, err := cq.Poll(make([]verbs.WC, 1)); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Poll after Close: %v", err)
	}
}

// TestCloseRules checks what may be closed while in use, and that device
// Close destroys everything.
func TestCloseRules(t *testing.T) {
	d := openTestDevice(t)
	n := newNode(t, d, 1<<16, allAccess)
	if err := n.pd.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("PD close with an MR and a QP: %v", err)
	}
	if err := n.scq.Close(); !errors.Is(err, verbs.ErrBusy) {
		t.Fatalf("CQ close under a QP: %v", err)
	}
	if _, err := n.pd.RegMR(nil, 0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("RegMR of nothing: %v", err)
	}
	if _, err := d.CreateCQ(0); !errors.Is(err, verbs.ErrInvalidArgument) {
		t.Fatalf("CQ of depth 0: %v", err)
	}
	must(t, n.qp.Close())
	must(t, n.qp.Close()) // idempotent
	if _, err := n.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("PostRecv after Close: %v", err)
	}
	must(t, n.scq.Close())
	must(t, n.mr.Close())
	must(t, n.pd.Close())
	// A second device's objects, left open, go with the device.
	d2 := openTestDevice(t)
	m := newNode(t, d2, 1<<16, allAccess)
	must(t, d2.Close())
	if _, err := m.pd.RegMR(m.buf, 0); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("RegMR after device Close: %v", err)
	}
	if _, err := d2.AllocPD(); !errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("AllocPD after Close: %v", err)
	}
	if d2.Port().State != verbs.PortDown {
		t.Fatalf("port of a closed device: %v", d2.Port().State)
	}
}

// TestForeignRKey: an rkey of a region in another PD of the device fails
// the requester with a remote access error (internal/verbstest).
func TestForeignRKey(t *testing.T) {
	d := openTestDevice(t)
	verbstest.ForeignRKey(t, func(t *testing.T) (*verbstest.Node, *verbstest.Node, verbs.MR) {
		a, b := newNode(t, d, 1<<16, allAccess), newNode(t, d, 1<<16, allAccess)
		connect(t, a, b, verbs.MTU1024, allAccess)
		other := newNode(t, d, 4096, allAccess) // its own PD
		return a.vt(), b.vt(), other.mr
	}, wcTimeout)
}
