//go:build linux

package shm

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/internal/verbstest"
	"github.com/rsock-go/rsock/verbs"
)

// wakeTimeout bounds each wait for a wake-up in these tests: a lost
// wake-up fails the test instead of hanging it.
const wakeTimeout = 10 * time.Second

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(ents) - 1 // the directory ReadDir opened
}

// channelFDs is what a channel whose both ends are in this process holds:
// two sockets, and on each side its doorbell and the peer's.
const channelFDs = 6

// TestCQsHoldNoDescriptor: completion queues cost no descriptor (the
// channel has one doorbell per side), so 500 CQs on each side of a
// channel hold no more descriptors than the channel alone, and closing
// everything gives every descriptor back.
func TestCQsHoldNoDescriptor(t *testing.T) {
	warm, warm2, err := Pair(Config{MaxQPs: 8}) // the netpoller's own descriptors
	must(t, err)
	must(t, warm.Close())
	must(t, warm2.Close())
	before := openFDs(t)
	da, db, err := Pair(Config{MaxQPs: 1024})
	must(t, err)
	withChannel := openFDs(t)
	if withChannel-before > channelFDs {
		t.Errorf("a channel holds %d descriptors, want at most %d", withChannel-before, channelFDs)
	}
	const n = 500
	var cqs []verbs.CQ
	for _, d := range []*Device{da, db} {
		for range n {
			c, err := d.CreateCQ(16)
			must(t, err)
			cqs = append(cqs, c)
		}
	}
	if got := openFDs(t); got != withChannel {
		t.Errorf("%d CQs on each side hold %d descriptors beyond the channel's", n, got-withChannel)
	}
	t.Logf("channel: %d descriptors; with %d CQs on each side: %d", withChannel-before, n, openFDs(t)-before)
	for _, c := range cqs {
		must(t, c.Close())
	}
	must(t, da.Close())
	must(t, db.Close())
	if got := openFDs(t); got != before {
		t.Errorf("%d descriptors after closing, %d before", got, before)
	}
}

// asleep waits until a waiter sleeps on c (its sleeping flag is set).
func asleep(t testing.TB, c verbs.CQ) {
	t.Helper()
	for deadline := time.Now().Add(wakeTimeout); c.(*CQ).flag.Load() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the waiter never slept")
		}
	}
}

// sleeperPairs connects n queue pairs of device a, each with a receive
// CQ of its own, to n of device b, which share their CQs, with a receive
// posted on each of a's.
func sleeperPairs(t *testing.T, n int) (da, db *Device, as, bs []*node) {
	da, db, err := Pair(Config{MaxQPs: 2*n + 8})
	must(t, err)
	t.Cleanup(func() { // last: cleanups run in reverse
		must(t, da.Close())
		must(t, db.Close())
	})
	// Side a: a CQ per queue pair (the one its waiter sleeps on); side b:
	// CQs shared by its queue pairs. One buffer on each side.
	nodeA, nodeB := newNode(t, da, 1<<16, allAccess), newNode(t, db, 1<<16, allAccess)
	for range n {
		rcq, err := da.CreateCQ(16)
		must(t, err)
		a := &node{dev: da, pd: nodeA.pd, scq: nodeA.scq, rcq: rcq, buf: nodeA.buf, mr: nodeA.mr, close: func(testing.TB) {}}
		a.qp, err = a.pd.CreateQP(&verbs.QPInitAttr{SendCQ: a.scq, RecvCQ: rcq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		b := &node{dev: db, pd: nodeB.pd, scq: nodeB.scq, rcq: nodeB.rcq, buf: nodeB.buf, mr: nodeB.mr, close: func(testing.TB) {}}
		b.qp, err = b.pd.CreateQP(&verbs.QPInitAttr{SendCQ: b.scq, RecvCQ: b.rcq, Cap: verbs.QPCap{MaxSendWR: 4, MaxRecvWR: 4, MaxSendSGE: 1, MaxRecvSGE: 1}})
		must(t, err)
		connect(t, a, b, allAccess)
		a.vt().PostRecv(t, 1, 0, 64)
		as, bs = append(as, a), append(bs, b)
	}
	t.Cleanup(func() {
		for i := range as {
			must(t, as[i].qp.Close())
			must(t, bs[i].qp.Close())
			must(t, as[i].rcq.Close())
		}
	})
	return da, db, as, bs
}

// TestManySleepers: waiters asleep on many CQs of one device at once are
// all woken by the peer's posts, through the one doorbell; sleeping holds
// no descriptor.
func TestManySleepers(t *testing.T) {
	const n = 200
	_, db, as, bs := sleeperPairs(t, n)
	fdsAwake := openFDs(t)
	ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
	defer cancel()
	woke := make([]time.Time, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, a := range as {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = a.rcq.Wait(ctx)
			woke[i] = time.Now()
		}()
	}
	for _, a := range as {
		asleep(t, a.rcq)
	}
	if got := openFDs(t); got != fdsAwake {
		t.Errorf("%d waiters asleep hold %d descriptors", n, got-fdsAwake)
	}
	rings := db.rings.Load()
	sent := time.Now()
	for _, b := range bs {
		b.vt().PostSend(t, verbs.SendWR{ID: 2, Opcode: verbs.WRSend, SGL: []verbs.SGE{b.vt().SGE(0, 8)}})
	}
	wg.Wait()
	var last time.Duration
	for i, a := range as {
		if errs[i] != nil {
			t.Fatalf("waiter %d: %v", i, errs[i])
		}
		last = max(last, woke[i].Sub(sent))
		verbstest.ExpectWC(t, a.rcq, 1, verbs.WCRecv, verbs.WCSuccess, wakeTimeout)
	}
	t.Logf("%d sleepers woken, the last %v after the first post (a loaded machine: not a measurement); %d doorbell rings",
		n, last, db.rings.Load()-rings)
}

// TestBellTurnChurn: while sleepers on many CQs come and go (deadlines,
// cancelled contexts, Kicks), passing the turn to read the doorbell
// among them, a waiter on another CQ is still woken by every post of the
// peer: the turn is never lost.
func TestBellTurnChurn(t *testing.T) {
	const n = 16
	_, db, as, bs := sleeperPairs(t, n)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		c := as[i].rcq.(*CQ)
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for k := 0; ; k++ {
				select {
				case <-stop:
					return
				default:
				}
				d := time.Duration(r.IntN(3000)) * time.Microsecond
				switch k % 3 {
				case 0:
					c.WaitKick(c.Kicks(), time.Now().Add(d))
				case 1:
					ctx, cancel := context.WithCancel(context.Background())
					time.AfterFunc(d, cancel)
					c.Wait(ctx)
					cancel()
				case 2:
					seen := c.Kicks()
					time.AfterFunc(d, c.Kick)
					if err := c.WaitKick(seen, time.Now().Add(wakeTimeout)); err != nil {
						t.Errorf("a Kick was lost: %v", err)
					}
				}
			}
		}()
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()
	a, b := as[0], bs[0]
	b.vt().PostSend(t, verbs.SendWR{ID: 9, Opcode: verbs.WRSend, SGL: []verbs.SGE{b.vt().SGE(0, 8)}}) // for the receive posted first
	verbstest.ExpectWC(t, a.rcq, 1, verbs.WCRecv, verbs.WCSuccess, wakeTimeout)
	verbstest.ExpectWC(t, b.scq, 9, verbs.WCSend, verbs.WCSuccess, wakeTimeout)
	r := rand.New(rand.NewPCG(3, 4))
	for round := range 100 {
		id := uint64(10 + round)
		a.vt().PostRecv(t, id, 0, 64)
		res := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), wakeTimeout)
			defer cancel()
			res <- a.rcq.Wait(ctx)
		}()
		time.Sleep(time.Duration(r.IntN(2000)) * time.Microsecond)
		b.vt().PostSend(t, verbs.SendWR{ID: id, Opcode: verbs.WRSend, SGL: []verbs.SGE{b.vt().SGE(0, 8)}})
		if err := <-res; err != nil {
			t.Fatalf("round %d: the waiter was not woken: %v", round, err)
		}
		verbstest.ExpectWC(t, a.rcq, id, verbs.WCRecv, verbs.WCSuccess, wakeTimeout)
		verbstest.ExpectWC(t, b.scq, id, verbs.WCSend, verbs.WCSuccess, wakeTimeout)
	}
	t.Logf("%d doorbell rings", db.rings.Load())
}

// TestLocalWakes: a sleeping waiter is woken at once by what happens in
// its own process (Kick, a local completion, its deadline, its context,
// the CQ's Close, the channel's end), with no doorbell rung.
func TestLocalWakes(t *testing.T) {
	// wait runs f in a goroutine once the CQ c is polled empty, waits
	// until it sleeps on c, does act and returns f's result.
	wait := func(t *testing.T, c verbs.CQ, f func() error, act func()) error {
		t.Helper()
		res := make(chan error, 1)
		go func() { res <- f() }()
		asleep(t, c)
		act()
		select {
		case err := <-res:
			return err
		case <-time.After(wakeTimeout):
			t.Fatal("the waiter was not woken")
			return nil
		}
	}
	t.Run("kick", func(t *testing.T) {
		da, _ := newPair(t)
		a := newNode(t, da, 1<<12, allAccess)
		c := a.rcq.(*CQ)
		seen := c.Kicks()
		if err := wait(t, c, func() error { return c.WaitKick(seen, time.Time{}) }, c.Kick); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("local completion", func(t *testing.T) {
		da, db := newPair(t)
		a, b := newNode(t, da, 1<<12, allAccess), newNode(t, db, 1<<12, allAccess)
		connect(t, a, b, allAccess)
		err := wait(t, a.scq, func() error { return a.scq.Wait(context.Background()) }, func() {
			a.vt().PostSend(t, verbs.SendWR{ID: 3, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
				SGL: []verbs.SGE{a.vt().SGE(0, 8)}, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()})
		})
		if err != nil {
			t.Fatal(err)
		}
		verbstest.ExpectWC(t, a.scq, 3, verbs.WCRDMAWrite, verbs.WCSuccess, wakeTimeout)
		if r := da.rings.Load() + db.rings.Load(); r != 0 {
			t.Errorf("%d doorbells rung for a local completion", r)
		}
	})
	t.Run("deadline", func(t *testing.T) {
		da, _ := newPair(t)
		c := newNode(t, da, 1<<12, allAccess).rcq.(*CQ)
		err := wait(t, c, func() error { return c.WaitKick(c.Kicks(), time.Now().Add(100*time.Millisecond)) }, func() {})
		if !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("%v, want os.ErrDeadlineExceeded", err)
		}
	})
	t.Run("context", func(t *testing.T) {
		da, _ := newPair(t)
		c := newNode(t, da, 1<<12, allAccess).rcq
		ctx, cancel := context.WithCancel(context.Background())
		if err := wait(t, c, func() error { return c.Wait(ctx) }, cancel); !errors.Is(err, context.Canceled) {
			t.Fatalf("%v, want context.Canceled", err)
		}
	})
	t.Run("close", func(t *testing.T) {
		da, _ := newPair(t)
		c, err := da.CreateCQ(16)
		must(t, err)
		err = wait(t, c, func() error { return c.Wait(context.Background()) }, func() { must(t, c.Close()) })
		if !errors.Is(err, verbs.ErrClosed) {
			t.Fatalf("%v, want verbs.ErrClosed", err)
		}
	})
	t.Run("channel end", func(t *testing.T) {
		da, db, err := Pair(Config{MaxQPs: 8})
		must(t, err)
		t.Cleanup(func() { must(t, da.Close()) })
		a, b := newNode(t, da, 1<<12, allAccess), newNode(t, db, 1<<12, allAccess)
		connect(t, a, b, allAccess)
		// b's queue pair stays: destroying it would fail a's at once
		// (TestPeerDestroysQP), before a's waiter sleeps.
		b.close = func(testing.TB) {}
		a.vt().PostRecv(t, 4, 0, 64)
		err = wait(t, a.rcq, func() error { return a.rcq.Wait(context.Background()) }, func() { must(t, db.Close()) })
		if err != nil {
			t.Fatal(err)
		}
		verbstest.ExpectWC(t, a.rcq, 4, verbs.WCRecv, verbs.WCWRFlushErr, wakeTimeout)
	})
}

// TestCloseManyQPsBothWays: both processes destroy many queue pairs at
// once, while their watchers are busy, so that each side's channel socket
// is full of the other's announcements: the watchers must not block on
// sending acknowledgements, which would deadlock them both, and every slot
// comes back.
func TestCloseManyQPsBothWays(t *testing.T) {
	const n = 50
	da, db, as, bs := sleeperPairs(t, n)
	// The smallest send buffers, which a few messages fill (a connected
	// pair's limit is the sender's buffer, about 200 messages by default).
	for _, d := range []*Device{da, db} {
		must(t, d.raw.Control(func(fd uintptr) {
			must(t, unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, 1))
		}))
	}
	// Hold both watchers off until both sockets are full.
	da.ctlMu.Lock()
	db.ctlMu.Lock()
	done := make(chan struct{}, 2)
	for _, side := range [][]*node{as, bs} {
		go func() {
			for _, x := range side {
				x.qp.Close()
			}
			done <- struct{}{}
		}()
	}
	time.Sleep(50 * time.Millisecond)
	da.ctlMu.Unlock()
	db.ctlMu.Unlock()
	for range 2 {
		select {
		case <-done:
		case <-time.After(wakeTimeout):
			t.Fatal("closing queue pairs on both sides deadlocked")
		}
	}
	for _, d := range []*Device{da, db} {
		for deadline := time.Now().Add(wakeTimeout); ; time.Sleep(time.Millisecond) {
			d.mu.Lock()
			waiting := len(d.pendingAk)
			d.mu.Unlock()
			if waiting == 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%d slots never acknowledged", waiting)
			}
		}
	}
}
