//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// seqFill makes p an n-byte packet to dst whose content is a function of
// seq alone: seq in the first 8 bytes, then a pattern derived from it.
func seqFill(p *link.Packet, n int, dst netip.AddrPort, seq uint64) {
	p.N, p.Addr = n, dst
	b := p.Buf[:n]
	binary.BigEndian.PutUint64(b, seq)
	for i := 8; i < n; i++ {
		b[i] = byte(seq*131 + uint64(i)*7 + uint64(i>>8))
	}
}

// seqCheck reports whether b is the content seqFill gives some sequence
// number, and which.
func seqCheck(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	seq := binary.BigEndian.Uint64(b)
	for i := 8; i < len(b); i++ {
		if b[i] != byte(seq*131+uint64(i)*7+uint64(i>>8)) {
			return seq, false
		}
	}
	return seq, true
}

// within reports whether b lies inside mem.
func within(b, mem []byte) bool {
	if cap(b) == 0 || len(mem) == 0 {
		return false
	}
	p := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	lo := uintptr(unsafe.Pointer(unsafe.SliceData(mem)))
	return p >= lo && p+uintptr(cap(b)) <= lo+uintptr(len(mem))
}

// TestGROViewLifetime documents the lifetime of the packets a GRO link
// returns: Recv sets each Buf to a view of the link's scratch, capped at
// N+4, instead of copying into the caller's buffers. A caller holding the
// packets of one Recv call (here: copies of the Packet values, so of the
// slice headers) finds them intact until it calls Recv again, even while
// more datagrams arrive in the socket: the kernel writes into the scratch
// only during a Recv call. Packets carried over from a coalesced message
// do not overwrite the views handed out before them, but once a later Recv
// call receives new datagrams, the old views show the new data: a caller
// must be done with (or have copied) the packets of one call before it
// makes the next.
func TestGROViewLifetime(t *testing.T) {
	a := listenOffloads(t, loop4, true, false)
	b := listenOffloads(t, loop4, false, true)
	const size, count = 1000, 10
	send := func(first uint64) []link.Packet {
		t.Helper()
		tx := bufs(count, size+wire.ICRCLen)
		for i := range tx {
			seqFill(&tx[i], size, b.LocalAddr(), first+uint64(i))
		}
		if err := a.Send(tx); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	intact := func(what string, held []link.Packet, want []link.Packet) {
		t.Helper()
		for i := range held {
			if !bytes.Equal(held[i].Bytes(), want[i].Bytes()) {
				t.Fatalf("%s: held packet %d changed", what, i)
			}
		}
	}

	first := send(0) // one GSO message of 10 segments
	mine := bufs(4, size+wire.ICRCLen)
	rx := make([]link.Packet, len(mine))
	copy(rx, mine)
	var calls [][]link.Packet // the packets of each call, as returned
	var starts []int          // the index in first of each call's first packet
	for got := 0; got < count; {
		n, err := b.Recv(rx)
		if err != nil {
			t.Fatal(err)
		}
		held := append([]link.Packet(nil), rx[:n]...)
		for i, p := range held {
			if p.N != size || cap(p.Buf) != size+wire.ICRCLen || len(p.Buf) != size+wire.ICRCLen {
				t.Fatalf("packet %d: N %d len %d cap %d, want %d, %d, %d",
					got+i, p.N, len(p.Buf), cap(p.Buf), size, size+4, size+4)
			}
			for _, m := range mine {
				if within(p.Buf, m.Buf) {
					t.Fatalf("packet %d was copied into a caller buffer", got+i)
				}
			}
			if !within(p.Buf, b.rx.big) {
				t.Fatalf("packet %d is not a view of the link's scratch", got+i)
			}
		}
		intact(fmt.Sprintf("call %d on return", len(calls)), held, first[got:got+n])
		b.recvMu.Lock()
		carried := b.rx.next < b.rx.end
		b.recvMu.Unlock()
		if carried {
			// Views of the packets handed out so far stay intact
			// while the rest of the message is handed out.
			for k, c := range calls {
				intact(fmt.Sprintf("call %d after call %d", k, len(calls)), c, first[starts[k]:])
			}
		}
		calls, starts = append(calls, held), append(starts, got)
		got += n
	}
	last, lastFirst := calls[len(calls)-1], starts[len(calls)-1]

	// New datagrams queue in the socket; the views of the last call stay
	// intact as long as Recv is not called.
	second := send(100)
	time.Sleep(50 * time.Millisecond)
	intact("last call with data queued", last, first[lastFirst:])

	// The next Recv receives them into the same scratch: the first
	// datagram (or coalesced message) goes to slot 0 at offset 0, where
	// the first packet of the first call was.
	n, err := b.Recv(rx)
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 || !bytes.Equal(rx[0].Bytes(), second[0].Bytes()) {
		t.Fatalf("Recv after the second send: %d packets, first one not as sent", n)
	}
	if !bytes.Equal(calls[0][0].Bytes(), second[0].Bytes()) {
		t.Fatal("the first view of the first call was not reused by a later Recv")
	}
	if bytes.Equal(calls[0][0].Bytes(), first[0].Bytes()) {
		t.Fatal("the first view still holds its old packet")
	}

	// The caller's own buffers are never written to by a GRO link.
	for i, m := range mine {
		if !bytes.Equal(m.Buf, make([]byte, len(m.Buf))) {
			t.Fatalf("caller buffer %d was written to", i)
		}
	}
}

// TestRecvConcurrentSendRace streams sequence-numbered packets into a link
// while the same link sends concurrently in another goroutine, and checks
// every received packet's content before the next Recv call: views must
// not be overwritten while held. Run with -race to check that Recv's
// scratch and Send's do not share state.
func TestRecvConcurrentSendRace(t *testing.T) {
	for _, c := range offloadCombos {
		t.Run(c.name, func(t *testing.T) {
			a := listenOffloads(t, loop4, c.gso, c.gro)
			b := listenOffloads(t, loop4, c.gso, c.gro)
			const total, window = 6000, 512
			sizes := []int{4096 + 28, 4096 + 28, 4096 + 28, 1000, 300, 4096 + 28}
			var received atomic.Int64
			var wg sync.WaitGroup
			defer wg.Wait()
			defer a.Close()
			defer b.Close()
			stop := make(chan struct{})
			defer close(stop)

			// a streams to b, then closes b once all arrived (or after
			// a while: UDP may drop), which ends the receive loop.
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer b.Close()
				tx := bufs(64, 4200)
				for seq := uint64(0); seq < total; {
					for wait := 0; int64(seq)-received.Load() > window && wait < 2000; wait++ {
						select {
						case <-stop:
							return
						case <-time.After(50 * time.Microsecond):
						}
					}
					k := 0
					for ; k < len(tx) && seq < total; k++ {
						seqFill(&tx[k], sizes[int(seq/16)%len(sizes)], b.LocalAddr(), seq)
						seq++
					}
					if err := a.Send(tx[:k]); err != nil {
						t.Error(err)
						return
					}
				}
				for wait := 0; received.Load() < total && wait < 400; wait++ {
					select {
					case <-stop:
						return
					case <-time.After(5 * time.Millisecond):
					}
				}
			}()
			// b sends to a at the same time as it receives, and a drains.
			wg.Add(2)
			go func() {
				defer wg.Done()
				tx := bufs(16, 600)
				for seq := uint64(0); ; seq++ {
					select {
					case <-stop:
						return
					default:
					}
					for i := range tx {
						seqFill(&tx[i], 500, a.LocalAddr(), seq)
					}
					if err := b.Send(tx); err != nil {
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			}()
			go func() {
				defer wg.Done()
				rx := bufs(64, 4200)
				for {
					n, err := a.Recv(rx)
					if err != nil {
						return
					}
					for _, p := range rx[:n] {
						if _, ok := seqCheck(p.Bytes()); !ok {
							t.Error("a: packet corrupted")
							return
						}
					}
				}
			}()

			rx := bufs(37, 4200) // not a multiple of the GRO segment count
			var prev []link.Packet
			var prevSeqs []uint64
			for {
				// The previous call's packets are still intact.
				for i, p := range prev {
					if seq, ok := seqCheck(p.Bytes()); !ok || seq != prevSeqs[i] {
						t.Fatalf("packet %d of the previous call changed before the next Recv", prevSeqs[i])
					}
				}
				n, err := b.Recv(rx)
				if errors.Is(err, link.ErrClosed) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				prev, prevSeqs = append(prev[:0], rx[:n]...), prevSeqs[:0]
				for _, p := range rx[:n] {
					seq, ok := seqCheck(p.Bytes())
					if !ok || p.ICRC != link.ICRCGood || p.Addr != a.LocalAddr() ||
						p.N != sizes[int(seq/16)%len(sizes)] || cap(p.Buf) < p.N+wire.ICRCLen {
						t.Fatalf("packet %d: content ok %v ICRC %v from %v N %d cap %d", seq, ok, p.ICRC, p.Addr, p.N, cap(p.Buf))
					}
					prevSeqs = append(prevSeqs, seq)
				}
				received.Add(int64(n))
			}
			// Loss is possible but must stay rare on loopback with the
			// window above.
			if got := received.Load(); got < total*9/10 {
				t.Fatalf("received %d of %d packets", got, total)
			} else if got < total {
				t.Logf("received %d of %d packets", got, total)
			}
		})
	}
}
