//go:build linux

package shm

import (
	"context"
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// expectQPGone checks that n's QP failed because its peer destroyed its
// end: ERR, with ErrQPGone (wrapping ECONNRESET) as its cause.
func expectQPGone(t *testing.T, n *node) {
	t.Helper()
	if s := n.qp.State(); s != verbs.QPSErr {
		t.Fatalf("QP in %v after the peer destroyed its end", s)
	}
	cause := n.qp.(verbs.Causer).Cause()
	if !errors.Is(cause, ErrQPGone) || !errors.Is(cause, syscall.ECONNRESET) {
		t.Fatalf("cause %v, want ErrQPGone wrapping ECONNRESET", cause)
	}
	if err := n.dev.Err(); err != nil {
		t.Fatalf("the channel ended: %v", err)
	}
}

// TestPeerDestroysQP: when the peer destroys the queue pair ours is
// connected to, ours moves to ERR, but only after the SENDs and
// WRITE_WITH_IMMs the peer published before are delivered; a waiter
// asleep on the receive CQ wakes for it; the channel and other queue
// pairs on it live on.
func TestPeerDestroysQP(t *testing.T) {
	t.Run("delivers first", func(t *testing.T) {
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a, b, allAccess)
		for i := range 4 {
			b.vt().PostRecv(t, uint64(10+i), 64*i, 64)
		}
		copy(a.buf, "last")
		a.vt().PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 4)}})
		a.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRRDMAWriteWithImm, Imm: 7,
			SGL: []verbs.SGE{a.vt().SGE(0, 4)}, RemoteAddr: b.mr.Addr() + 1024, RKey: b.mr.RKey()})
		must(t, a.qp.Close())
		verbstest.ExpectWC(t, b.rcq, 10, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
		if string(b.buf[:4]) != "last" {
			t.Fatalf("received %q", b.buf[:4])
		}
		wc := verbstest.ExpectWC(t, b.rcq, 11, verbs.WCRecvRDMAWithImm, verbs.WCSuccess, wcTimeout)
		if wc.Imm != 7 || string(b.buf[1024:1028]) != "last" {
			t.Fatalf("write with imm %d: %q", wc.Imm, b.buf[1024:1028])
		}
		verbstest.ExpectWC(t, b.rcq, 12, verbs.WCRecv, verbs.WCWRFlushErr, wcTimeout)
		verbstest.ExpectWC(t, b.rcq, 13, verbs.WCRecv, verbs.WCWRFlushErr, wcTimeout)
		expectQPGone(t, b)
		b.vt().PostSend(t, verbs.SendWR{ID: 3, Opcode: verbs.WRSend})
		verbstest.ExpectWC(t, b.scq, 3, verbs.WCSend, verbs.WCWRFlushErr, wcTimeout)
		// The channel serves new queue pairs.
		a2, b2 := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a2, b2, allAccess)
		b2.vt().PostRecv(t, 1, 0, 64)
		a2.vt().PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a2.vt().SGE(0, 4)}})
		verbstest.ExpectWC(t, b2.rcq, 1, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
	})
	t.Run("waiter wakes", func(t *testing.T) {
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a, b, allAccess)
		b.vt().PostRecv(t, 1, 0, 64)
		woke := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
			defer cancel()
			woke <- b.rcq.Wait(ctx)
		}()
		time.Sleep(20 * time.Millisecond) // b sleeps on its doorbell
		must(t, a.qp.Close())
		start := time.Now()
		if err := <-woke; err != nil {
			t.Fatalf("Wait: %v", err)
		}
		if d := time.Since(start); d > time.Second {
			t.Fatalf("woke %v after the peer destroyed its queue pair", d)
		}
		verbstest.ExpectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCWRFlushErr, wcTimeout)
		expectQPGone(t, b)
	})
	t.Run("waits for receives", func(t *testing.T) {
		// Entries that wait for a receive keep the QP up until taken.
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a, b, allAccess)
		for i := range 3 {
			a.vt().PostSend(t, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 4)}})
		}
		must(t, a.qp.Close())
		var wcs [4]verbs.WC
		deadline := time.Now().Add(50 * time.Millisecond)
		for time.Now().Before(deadline) {
			if n, err := b.rcq.Poll(wcs[:]); n != 0 || err != nil {
				t.Fatalf("completions without receives: %v %v", wcs[:n], err)
			}
		}
		if s := b.qp.State(); s == verbs.QPSErr {
			t.Fatal("ERR with three arrivals waiting for receives")
		}
		for i := range 3 {
			b.vt().PostRecv(t, uint64(20+i), 64*i, 64)
		}
		for i := range 3 {
			verbstest.ExpectWC(t, b.rcq, uint64(20+i), verbs.WCRecv, verbs.WCSuccess, wcTimeout)
		}
		b.vt().PostRecv(t, 30, 0, 64)
		verbstest.ExpectWC(t, b.rcq, 30, verbs.WCRecv, verbs.WCWRFlushErr, wcTimeout)
		expectQPGone(t, b)
	})
	t.Run("send delivers first", func(t *testing.T) {
		// A send to the gone queue pair fails with retry exceeded, after
		// the arrivals published before are completed.
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a, b, allAccess)
		b.vt().PostRecv(t, 1, 0, 64)
		a.vt().PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 4)}})
		must(t, a.qp.Close())
		// The handler has run once the channel's messages are read.
		must(t, db.sync())
		b.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{b.vt().SGE(0, 4)}})
		verbstest.ExpectWC(t, b.scq, 2, verbs.WCSend, verbs.WCRetryExcErr, wcTimeout)
		verbstest.ExpectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
		expectQPGone(t, b)
	})
}
