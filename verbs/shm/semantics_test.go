//go:build linux

package shm

import (
	"context"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// TestStateMachine checks the transitions (verbs.CheckTransition, as
// every provider) and what a QP allows in each state.
func TestStateMachine(t *testing.T) {
	da, db := newPair(t)
	a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
	if s := a.qp.State(); s != verbs.QPSReset {
		t.Fatalf("new QP in %v", s)
	}
	err := a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR}, verbs.AttrState)
	var te *verbs.TransitionError
	if !errors.As(err, &te) || !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("RESET→RTR: %v", err)
	}
	if _, err := a.qp.PostRecv([]verbs.RecvWR{{ID: 1}}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostRecv in RESET: %v", err)
	}
	if _, err := a.qp.PostSend([]verbs.SendWR{{ID: 1, Opcode: verbs.WRSend}}); !errors.Is(err, verbs.ErrInvalidState) {
		t.Fatalf("PostSend in RESET: %v", err)
	}
	connect(t, a, b, allAccess)
	// ERR flushes posted receives and every later request.
	a.vt().PostRecv(t, 10, 0, 64)
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSErr}, verbs.AttrState))
	verbstest.ExpectWC(t, a.rcq, 10, verbs.WCRecv, verbs.WCWRFlushErr, wcTimeout)
	a.vt().PostSend(t, verbs.SendWR{ID: 11, Opcode: verbs.WRSend})
	verbstest.ExpectWC(t, a.scq, 11, verbs.WCSend, verbs.WCWRFlushErr, wcTimeout)
	// The peer's sends to a QP in ERR fail (as retries would on a wire).
	b.vt().PostSend(t, verbs.SendWR{ID: 12, Opcode: verbs.WRSend})
	verbstest.ExpectWC(t, b.scq, 12, verbs.WCSend, verbs.WCRetryExcErr, wcTimeout)
	if b.qp.State() != verbs.QPSErr {
		t.Fatalf("after a failed send the QP is %v", b.qp.State())
	}
}

// TestErrors: requests naming memory they may not reach fail with the
// statuses of RC, move the QP to ERR and flush the rest.
func TestErrors(t *testing.T) {
	const localOnly = verbs.AccessLocalWrite
	cases := []struct {
		name   string
		access verbs.Access // of b's MR and QP
		wr     func(a, b *node) verbs.SendWR
		status verbs.WCStatus
	}{
		{"unknown rkey", allAccess, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey() + 1}
		}, verbs.WCRemAccessErr},
		{"past the region", allAccess, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 1<<16 - 4, RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"before the region", allAccess, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr() - 8, RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"read of a write-only region", verbs.AccessLocalWrite | verbs.AccessRemoteWrite, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMARead, SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
		{"atomic unaligned", allAccess, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRAtomicFetchAdd, SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr() + 4, RKey: b.mr.RKey()}
		}, verbs.WCRemInvReqErr},
		{"bad lkey", allAccess, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{{Addr: a.mr.Addr(), Length: 8, LKey: a.mr.LKey() + 1}}}
		}, verbs.WCLocProtErr},
		{"local SGE past its region", allAccess, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(1<<16-4, 8)}}
		}, verbs.WCLocProtErr},
		{"write to a local-only region", localOnly, func(a, b *node) verbs.SendWR {
			return verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		}, verbs.WCRemAccessErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			da, db := newPair(t)
			a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, c.access)
			connect(t, a, b, allAccess)
			must(t, b.qp.Modify(&verbs.QPAttr{AccessFlags: c.access}, verbs.AttrAccessFlags))
			wr := c.wr(a, b)
			wr.ID = 1
			a.vt().PostSend(t, wr)
			a.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRSend})
			verbstest.ExpectWC(t, a.scq, 1, wcOpcode(wr.Opcode), c.status, wcTimeout)
			verbstest.ExpectWC(t, a.scq, 2, verbs.WCSend, verbs.WCWRFlushErr, wcTimeout)
			if s := a.qp.State(); s != verbs.QPSErr {
				t.Fatalf("QP in %v", s)
			}
		})
	}
	t.Run("receive too small", func(t *testing.T) {
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
		connect(t, a, b, allAccess)
		b.vt().PostRecv(t, 1, 0, 4)
		a.vt().PostSend(t, verbs.SendWR{ID: 1, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 8)}})
		verbstest.ExpectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCLocLenErr, wcTimeout)
	})
}

// TestRingFull streams more SENDs than the peer's inbound ring holds; the
// sender's requests wait in its send queue and move on when the receiver
// (another goroutine) consumes, the sender asleep on its send CQ in
// between: every message arrives once, in order.
func TestRingFull(t *testing.T) {
	da, db := newPair(t)
	a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
	connect(t, a, b, allAccess)
	const total = 20 * ringEntries
	errc := make(chan error, 1)
	go func() {
		errc <- func() error {
			next := uint32(0)
			for i := range 64 {
				if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: uint64(i), SGL: []verbs.SGE{b.vt().SGE(i*64, 64)}}}); err != nil {
					return err
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
			defer cancel()
			wcs := make([]verbs.WC, 16)
			for next < total {
				k, err := b.rcq.Poll(wcs)
				if err != nil {
					return err
				}
				for _, wc := range wcs[:k] {
					got := binary.LittleEndian.Uint32(b.buf[wc.WRID*64:])
					if wc.Status != verbs.WCSuccess || got != next {
						return errors.New("out of order: " + wc.String())
					}
					next++
					if _, err := b.qp.PostRecv([]verbs.RecvWR{{ID: wc.WRID, SGL: []verbs.SGE{b.vt().SGE(int(wc.WRID)*64, 64)}}}); err != nil {
						return err
					}
				}
				if k == 0 {
					if err := b.rcq.Wait(ctx); err != nil {
						return err
					}
				}
			}
			return nil
		}()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
	defer cancel()
	wcs := make([]verbs.WC, 64)
	for i, done := 0, 0; done < total; {
		for i < total {
			binary.LittleEndian.PutUint32(a.buf[:4], uint32(i))
			_, err := a.qp.PostSend([]verbs.SendWR{{ID: uint64(i), Opcode: verbs.WRSend, Flags: verbs.SendSignaled | verbs.SendInline,
				SGL: []verbs.SGE{a.vt().SGE(0, 4)}}})
			if errors.Is(err, verbs.ErrQueueFull) {
				break
			}
			must(t, err)
			i++
		}
		k, err := a.scq.Poll(wcs)
		must(t, err)
		for _, wc := range wcs[:k] {
			if wc.Status != verbs.WCSuccess || wc.WRID != uint64(done) {
				t.Fatalf("send completion %d: %v", done, wc)
			}
			done++
		}
		if k == 0 {
			must(t, a.scq.Wait(ctx))
		}
	}
	must(t, <-errc)
}

// TestDoorbell: a waiter asleep on its CQ is woken by the peer's post;
// the peer rings only while it sleeps (posts to a waiter that is not
// asleep ring nothing).
func TestDoorbell(t *testing.T) {
	da, db := newPair(t)
	a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
	connect(t, a, b, allAccess)
	for i := range 100 {
		b.vt().PostRecv(t, uint64(i), 0, 64)
		a.vt().PostSend(t, verbs.SendWR{ID: uint64(i), Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 8)}})
		verbstest.ExpectWC(t, a.scq, uint64(i), verbs.WCSend, verbs.WCSuccess, wcTimeout)
		verbstest.ExpectWC(t, b.rcq, uint64(i), verbs.WCRecv, verbs.WCSuccess, wcTimeout)
	}
	if r := da.rings.Load(); r != 0 {
		t.Fatalf("%d doorbells rung for a receiver that never slept", r)
	}
	b.vt().PostRecv(t, 200, 0, 64)
	woke := make(chan time.Time, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), wcTimeout)
		defer cancel()
		b.rcq.Wait(ctx)
		woke <- time.Now()
	}()
	time.Sleep(50 * time.Millisecond)
	if b.rcq.(*CQ).flag.Load() == 0 {
		t.Fatal("the waiter is not asleep")
	}
	sent := time.Now()
	a.vt().PostSend(t, verbs.SendWR{ID: 200, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 8)}})
	at := <-woke
	if r := da.rings.Load(); r != 1 {
		t.Fatalf("%d doorbells rung for one sleeping waiter", r)
	}
	t.Logf("woke %v after the post", at.Sub(sent))
	verbstest.ExpectWC(t, b.rcq, 200, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
}

// TestSendBeforePeerReady: a SEND posted while the peer's queue pair is
// not ready yet (INIT) is carried out once it is, though nothing polls
// or waits on the sender's CQs in the meantime (a stream's first Write
// right after a handshake, followed by a wait elsewhere).
func TestSendBeforePeerReady(t *testing.T) {
	da, db := newPair(t)
	a, b := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
	must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: allAccess},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: da.Port().GIDs[0]},
		PathMTU: verbs.MTU4096, DestQPN: b.qp.QPN(), MaxDestRdAtomic: 16, MinRNRTimer: 1},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	must(t, a.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, Timeout: 14, RetryCnt: 7, RNRRetry: 7, MaxRdAtomic: 16},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic))
	b.vt().PostRecv(t, 1, 0, 64)
	copy(a.buf, "early")
	a.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{a.vt().SGE(0, 5)}})
	time.Sleep(5 * time.Millisecond) // the send waits for b
	must(t, b.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR, AH: verbs.AH{DGID: db.Port().GIDs[0]},
		PathMTU: verbs.MTU4096, DestQPN: a.qp.QPN(), MaxDestRdAtomic: 16, MinRNRTimer: 1},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer))
	verbstest.ExpectWC(t, b.rcq, 1, verbs.WCRecv, verbs.WCSuccess, wcTimeout)
	if string(b.buf[:5]) != "early" {
		t.Fatalf("received %q", b.buf[:5])
	}
}
