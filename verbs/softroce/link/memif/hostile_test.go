//go:build linux

package memif

import (
	"errors"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// receiveWays are the two ways a link receives: Recv, which copies
// frames out of the shared memory, and RecvLoop, which leaves payloads
// there (link.Packet.Tail).
var receiveWays = []string{"Recv", "RecvLoop"}

// touched keeps the bytes receiveUntilErr reads from being optimized away.
var touched atomic.Uint64

// delivered counts the packets receiveUntilErr received.
var delivered atomic.Uint64

// receiveUntilErr receives on l the given way until it fails, reading
// every byte of every packet, and returns the error.
func receiveUntilErr(l *Link, way string) error {
	pkts := make([]link.Packet, 8)
	touch := func(ps []link.Packet) {
		var sum uint64
		for _, p := range ps {
			for _, b := range p.Buf[:p.N] {
				sum += uint64(b)
			}
			if p.Tail != nil {
				for _, b := range p.Tail[:len(p.Tail)+4] {
					sum += uint64(b)
				}
			}
		}
		touched.Add(sum)
		delivered.Add(uint64(len(ps)))
	}
	if way == "RecvLoop" {
		return l.RecvLoop(pkts, touch)
	}
	for {
		n, err := l.Recv(pkts)
		if err != nil {
			return err
		}
		touch(pkts[:n])
	}
}

// recvErr calls Recv until it fails, or fails the test after a while.
func recvErr(t *testing.T, l *Link) error {
	t.Helper()
	return recvErrVia(t, l, "Recv")
}

// recvErrVia receives the given way until it fails, or fails the test
// after a while.
func recvErrVia(t *testing.T, l *Link, way string) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- receiveUntilErr(l, way) }()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		l.Close()
		<-errc
		t.Fatalf("%s did not fail", way)
		return nil
	}
}

// peerSees checks that the other side learned why the link failed.
func peerSees(t *testing.T, peer *Link, want string) {
	t.Helper()
	err := recvErr(t, peer)
	var de *DisconnectError
	if !errors.As(err, &de) || !strings.Contains(de.Reason, want) {
		t.Fatalf("peer got %v, want a DISCONNECT mentioning %q", err, want)
	}
}

func TestHostileC2S(t *testing.T) {
	cases := []struct {
		name  string
		write func(r Ring, size int, regLen int)
		want  string
	}{
		{"offset beyond region", func(r Ring, size, regLen int) {
			r.Desc(0).Encode(0, 0, 100, uint32(regLen-10), 0)
			r.StoreHead(1)
		}, "out of bounds"},
		{"length overflows", func(r Ring, size, regLen int) {
			r.Desc(0).Encode(0, 0, 0xffffffff, 16, 0)
			r.StoreHead(1)
		}, "out of bounds"},
		{"unknown region", func(r Ring, size, regLen int) {
			r.Desc(0).Encode(0, 5, 10, 0, 0)
			r.StoreHead(1)
		}, "region 5"},
		{"head beyond ring", func(r Ring, size, regLen int) {
			r.StoreHead(uint16(size + 1))
		}, "head"},
		{"head moved back", func(r Ring, size, regLen int) {
			r.StoreHead(0xffff)
		}, "head"},
		{"chain fills ring", func(r Ring, size, regLen int) {
			for i := range size {
				r.Desc(i).Encode(DescNext, 0, 8, 0, 0)
			}
			r.StoreHead(uint16(size))
		}, "whole ring"},
	}
	for _, way := range receiveWays {
		for _, c := range cases {
			t.Run(way+"/"+c.name, func(t *testing.T) {
				srv, cli := pair(t, Config{}, Config{Log2RingSize: 4})
				// The client's mapping of the C2S ring, written behind its
				// link's back.
				c.write(cli.tx.ring, int(cli.tx.size), len(cli.regs[0].mem))
				err := recvErrVia(t, srv, way)
				if !errors.Is(err, ErrRing) || !strings.Contains(err.Error(), c.want) {
					t.Fatalf("%s: %v, want ErrRing mentioning %q", way, err, c.want)
				}
				peerSees(t, cli, "corrupt ring")
				if err := srv.Send([]link.Packet{{Buf: mkPkt(20, 0), N: 20, Addr: addrB}}); !errors.Is(err, ErrRing) {
					t.Fatalf("Send on the failed link: %v", err)
				}
			})
		}
	}
}

func TestLongChain(t *testing.T) {
	for _, way := range receiveWays {
		srv, cli := pair(t, Config{}, Config{Log2RingSize: 8})
		r := cli.tx.ring
		for i := range maxChain + 1 {
			r.Desc(i).Encode(DescNext, 0, 8, 0, 0)
		}
		r.StoreHead(maxChain + 1)
		if err := recvErrVia(t, srv, way); !errors.Is(err, ErrRing) || !strings.Contains(err.Error(), "chain longer") {
			t.Fatalf("%s: %v", way, err)
		}
	}
}

func TestHostileS2C(t *testing.T) {
	for _, way := range receiveWays {
		t.Run(way+"/tail beyond offered buffers", func(t *testing.T) {
			srv, cli := pair(t, Config{}, Config{Log2RingSize: 4})
			srv.tx.ring.StoreTail(17)
			if err := recvErrVia(t, cli, way); !errors.Is(err, ErrRing) || !strings.Contains(err.Error(), "offered") {
				t.Fatalf("%s: %v", way, err)
			}
			peerSees(t, srv, "corrupt ring")
		})
		t.Run(way+"/filled descriptor out of bounds", func(t *testing.T) {
			srv, cli := pair(t, Config{}, Config{Log2RingSize: 4})
			srv.tx.ring.Desc(0).Encode(0, 0, 64, 0xfffffff0, 0)
			srv.tx.ring.StoreTail(1)
			if err := recvErrVia(t, cli, way); !errors.Is(err, ErrRing) {
				t.Fatalf("%s: %v", way, err)
			}
		})
	}
	t.Run("offered buffer out of bounds", func(t *testing.T) {
		srv, cli := pair(t, Config{}, Config{Log2RingSize: 4})
		cli.rx.ring.Desc(0).Encode(0, 0, 2048, 0xfffff000, 0)
		err := srv.Send([]link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrB}})
		if !errors.Is(err, ErrRing) {
			t.Fatalf("Send: %v", err)
		}
	})
	t.Run("head far ahead of tail", func(t *testing.T) {
		srv, cli := pair(t, Config{}, Config{Log2RingSize: 4})
		cli.rx.ring.StoreHead(0x4000)
		err := srv.Send([]link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrB}})
		if !errors.Is(err, ErrRing) {
			t.Fatalf("Send: %v", err)
		}
	})
	t.Run("client tail moved", func(t *testing.T) {
		srv, cli := pair(t, Config{}, Config{Log2RingSize: 4})
		srv.rx.ring.StoreTail(0x8000)
		err := cli.Send([]link.Packet{{Buf: mkPkt(64, 0), N: 64, Addr: addrA}})
		if !errors.Is(err, ErrRing) {
			t.Fatalf("Send: %v", err)
		}
	})
}

// TestMovingHead has a hostile client rewrite descriptors and the head of
// its ring at random while the server receives: the server must neither
// crash nor touch memory outside the region, and either fails with
// ErrRing or drops the garbage and counts it (RxDropped): the region holds
// no RoCEv2 frame, so a receiver still up after 200 ms that counted no
// drop took garbage for packets or never read the ring.
func TestMovingHead(t *testing.T) {
	for _, way := range receiveWays {
		t.Run(way, func(t *testing.T) { movingHead(t, way) })
		t.Run(way+"-published", func(t *testing.T) { garbagePublished(t, way) })
	}
}

// garbagePublished has a client publish garbage frames the way a producer
// should (in-bounds descriptors, the head advanced one slot at a time, never
// past a full ring): the server must consume every one, deliver none and
// count each as dropped, and stay up.
func garbagePublished(t *testing.T, way string) {
	srv, cli := pair(t, Config{}, Config{Log2RingSize: 5})
	r := cli.tx.ring
	size := uint16(cli.tx.size)
	regLen := len(cli.regs[0].mem)
	delivered.Store(0)
	errc := make(chan error, 1)
	go func() { errc <- receiveUntilErr(srv, way) }()
	rng := rand.New(rand.NewPCG(3, 4))
	const frames = 200
	head := r.Head()
	deadline := time.Now().Add(10 * time.Second)
	// waitTail waits until fewer than n published slots are unconsumed.
	waitTail := func(n uint16) {
		for head-r.Tail() >= n {
			if time.Now().After(deadline) {
				t.Fatalf("the server consumed up to %d of %d published slots", r.Tail(), head)
			}
			time.Sleep(time.Millisecond)
		}
	}
	for range frames {
		waitTail(size)
		off := rng.IntN(regLen - 1)
		r.Desc(int(head%size)).Encode(0, 0, uint32(1+rng.IntN(min(256, regLen-off-1))), uint32(off), 0)
		head++
		r.StoreHead(head)
	}
	waitTail(1)
	// The last frames may still be in the receiver's hands.
	for srv.Stats().RxDropped < frames && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	st := srv.Stats()
	srv.Close()
	err := <-errc
	if !errors.Is(err, link.ErrClosed) {
		t.Fatalf("receiving garbage frames ended with %v, want the receiver up until Close", err)
	}
	if st.RxDropped != frames || delivered.Load() != 0 {
		t.Fatalf("%d garbage frames published: %d counted as dropped, %d delivered as packets", frames, st.RxDropped, delivered.Load())
	}
}

func movingHead(t *testing.T, way string) {
	srv, cli := pair(t, Config{}, Config{Log2RingSize: 5})
	r := cli.tx.ring
	size := int(cli.tx.size)
	regLen := len(cli.regs[0].mem)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		rng := rand.New(rand.NewPCG(1, 2))
		for {
			select {
			case <-stop:
				return
			default:
			}
			i := rng.IntN(size)
			off := uint32(rng.IntN(regLen))
			r.Desc(i).Encode(uint16(rng.IntN(2)), 0, uint32(rng.IntN(regLen-int(off)+1)), off, 0)
			// A head anywhere from the tail to a full ring ahead of it.
			r.StoreHead(r.Tail() + uint16(rng.IntN(size+1)))
		}
	}()
	delivered.Store(0)
	errc := make(chan error, 1)
	go func() { errc <- receiveUntilErr(srv, way) }()
	// Garbage for 200 ms, and on until the receiver has dropped some (up
	// to 5 s: a loaded machine, as CI's parallel race stage, can keep
	// the receiver from running for longer than 200 ms).
	var err error
	start := time.Now()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err = <-errc:
			break wait
		case <-tick.C:
			if since := time.Since(start); since >= 5*time.Second || since >= 200*time.Millisecond && srv.Stats().RxDropped > 0 {
				srv.Close()
				err = <-errc
				break wait
			}
		}
	}
	close(stop)
	wg.Wait()
	dropped := srv.Stats().RxDropped
	t.Logf("ended with %v after dropping %d frames", err, dropped)
	switch {
	case errors.Is(err, ErrRing):
	case errors.Is(err, link.ErrClosed):
		if dropped == 0 {
			t.Fatalf("%v of garbage frames and none dropped (%d packets delivered)", time.Since(start).Round(time.Millisecond), delivered.Load())
		}
		if n := delivered.Load(); n != 0 {
			t.Fatalf("%d garbage frames delivered as packets", n)
		}
	default:
		t.Fatalf("Recv: %v", err)
	}
}

// FuzzRing runs both receivers (both roles, both ways of reading a
// frame) and the server's sender over a ring and
// region filled with arbitrary bytes. Whatever the contents, they end
// (no endless chain) and never index outside the region (the Go bounds
// checks would panic).
func FuzzRing(f *testing.F) {
	const log2 = 3
	rl := RingLen(log2)
	seed := make([]byte, rl+256)
	r := Ring(seed[:rl])
	r.Init()
	for i := range 8 {
		r.Desc(i).Encode(uint16(i&1), 0, 32, uint32(rl+i*32), 0)
	}
	r.StoreHead(8)
	r.StoreTail(4)
	f.Add(seed, uint16(0), uint16(8))
	f.Fuzz(func(t *testing.T, b []byte, last, offered uint16) {
		if len(b) < rl {
			return
		}
		mem := make([]byte, len(b)) // 8-aligned, as atomics need
		copy(mem, b)
		regs := []region{{mem: mem, fd: -1}}
		ring := Ring(mem[:rl])
		dst := make([]byte, 300)
		for _, client := range []bool{false, true} {
			q := rxQueue{ring: ring, regs: regs, size: 1 << log2, client: client, last: last,
				offered: last + offered%9, bufSize: 8, bufBase: uint32(rl)}
			if client && int(q.bufBase)+8*8 > len(mem) {
				continue
			}
			n, err := q.avail()
			if err != nil {
				continue
			}
			for used := 0; used < n; {
				// RecvLoop's way first: a frame in one buffer is read in place.
				if buf, one, err := q.single(used); err != nil {
					break
				} else if one && len(buf) > 0 {
					touched.Add(uint64(buf[0]) + uint64(buf[len(buf)-1])) // readable, in the region
				}
				k, slots, res, err := q.next(dst, used, n-used)
				if err != nil || res == rxIncomplete {
					break
				}
				if slots == 0 || k > len(dst) {
					t.Fatalf("next: %d bytes in %d slots", k, slots)
				}
				used += slots
			}
			q.release(n)
		}
		tq := txQueue{ring: ring, regs: regs, size: 1 << log2, idx: last}
		if free, err := tq.free(); err == nil {
			frame := make([]byte, 100)
			if _, err := tq.put([][]byte{frame[:40], frame[40:]}, 100, free); err == nil {
				tq.publish()
			}
		}
	})
}
