//go:build linux

package udp

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// loopRecv runs RecvLoop on l in a goroutine and passes a copy of every
// packet it hands out to the returned channel; the error channel gets
// RecvLoop's result.
func loopRecv(t *testing.T, l *Link, batch int) (<-chan link.Packet, <-chan error) {
	t.Helper()
	pkts := make(chan link.Packet, 4096)
	errc := make(chan error, 1)
	go func() {
		errc <- l.RecvLoop(bufs(batch, 4200), func(b []link.Packet) {
			if len(b) == 0 {
				t.Error("empty batch")
			}
			for _, p := range b {
				q := p
				q.Buf = append([]byte(nil), p.Buf[:p.N]...)
				pkts <- q
			}
		})
	}()
	return pkts, errc
}

func expect(t *testing.T, pkts <-chan link.Packet, want []link.Packet) {
	t.Helper()
	for i := range want {
		select {
		case p := <-pkts:
			if p.N != want[i].N || string(p.Buf) != string(want[i].Buf[:want[i].N]) || p.ICRC != link.ICRCGood {
				t.Fatalf("packet %d: N %d ICRC %v, want N %d and its bytes", i, p.N, p.ICRC, want[i].N)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("packet %d of %d did not arrive", i, len(want))
		}
	}
}

// TestRecvLoop sends bursts of every size class with pauses between them:
// after a receive call that emptied the socket the loop waits without
// asking again, so an arrival it failed to notice would stall the test.
// It runs with and without GRO, with a batch smaller than a burst, and
// ends with Close.
func TestRecvLoop(t *testing.T) {
	for _, gro := range []bool{true, false} {
		name := map[bool]string{true: "gro", false: "plain"}[gro]
		t.Run(name, func(t *testing.T) {
			a := listen(t, Config{Addr: loop4})
			b := listen(t, Config{Addr: loop4, DisableGRO: !gro})
			if b.gro != gro {
				t.Skipf("GRO %v not available: the kernel lacks UDP_GRO", gro)
			}
			pkts, errc := loopRecv(t, b, 8)
			r := rand.New(rand.NewPCG(7, 8))
			for round, n := range []int{1, 1, 3, 20, 1, 64, 2, 100, 1} {
				tx := bufs(n, 4200)
				for i := range tx {
					size := 4096 + 28
					if i%5 == 4 || n == 1 {
						size = 20 + r.IntN(1000)
					}
					fill(&tx[i], size, b.LocalAddr(), r)
				}
				if err := a.Send(tx); err != nil {
					t.Fatal(err)
				}
				expect(t, pkts, tx)
				if round%2 == 0 {
					time.Sleep(2 * time.Millisecond) // the loop parks
				}
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
			select {
			case err := <-errc:
				if !errors.Is(err, link.ErrClosed) {
					t.Fatalf("RecvLoop after Close: %v", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("Close did not end RecvLoop")
			}
			if err := b.RecvLoop(bufs(1, 100), func([]link.Packet) {}); !errors.Is(err, link.ErrClosed) {
				t.Fatalf("RecvLoop on a closed link: %v", err)
			}
		})
	}
}

// TestRecvLoopAfterRecv: packets a Recv call left over (a coalesced
// message larger than its pkts) come first out of RecvLoop.
func TestRecvLoopAfterRecv(t *testing.T) {
	a, b := pair(t, loop4)
	if !b.gro {
		t.Skip("no UDP_GRO: Recv keeps no packets over")
	}
	r := rand.New(rand.NewPCG(9, 10))
	tx := bufs(10, 4200)
	for i := range tx {
		fill(&tx[i], 4096+28, b.LocalAddr(), r)
	}
	if err := a.Send(tx); err != nil {
		t.Fatal(err)
	}
	rx := bufs(3, 4200)
	got := 0
	for got == 0 {
		n, err := b.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if string(rx[i].Buf[:rx[i].N]) != string(tx[got].Buf[:tx[got].N]) {
				t.Fatalf("Recv: packet %d differs", got)
			}
			got++
		}
	}
	pkts, errc := loopRecv(t, b, 4)
	expect(t, pkts, tx[got:])
	b.Close()
	if err := <-errc; !errors.Is(err, link.ErrClosed) {
		t.Fatalf("RecvLoop after Close: %v", err)
	}
}
