//go:build dpdk

package dpdk

import (
	"fmt"
	"runtime"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk/internal/rte"
	"github.com/rsock-go/rsock/verbs/softroce/link/internal/ethframe"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// Send frames and transmits pkts; see link.Link. A burst of up to 64
// packets is one cgo call; the tx queue takes one burst at a time.
func (l *Link) Send(pkts []link.Packet) error {
	for len(pkts) > 0 {
		n := min(len(pkts), rte.Burst)
		if err := l.sendBurst(pkts[:n]); err != nil {
			return err
		}
		pkts = pkts[n:]
	}
	return nil
}

// SendsTails reports that Send takes packets in two pieces
// (link.Packet.Tail): it copies them into the mbuf piece by piece.
func (l *Link) SendsTails() bool { return true }

var _ link.TailSender = (*Link)(nil)

func (l *Link) sendBurst(pkts []link.Packet) error {
	var macs [rte.Burst]wire.MAC
	var ok [rte.Burst]bool
	want := 0
	for i := range pkts {
		p := &pkts[i]
		if p.N < wire.BTHLen || p.N > len(p.Buf) {
			return fmt.Errorf("dpdk: packet of %d bytes in a %d-byte buffer", p.N, len(p.Buf))
		}
		if ethframe.MaxHeaderLen+p.N+len(p.Tail)+wire.ICRCLen > MaxFrameLen {
			return fmt.Errorf("dpdk: %d-byte packet exceeds the %d-byte frame", p.N+len(p.Tail), MaxFrameLen)
		}
		if i > 0 && p.Addr.Addr() == pkts[i-1].Addr.Addr() {
			macs[i], ok[i] = macs[i-1], ok[i-1]
		} else {
			macs[i], ok[i] = l.resolve(p.Addr.Addr())
		}
		if ok[i] {
			want++
		} else {
			l.unresolved.Add(1)
		}
	}
	if want == 0 {
		return l.checkOpen()
	}
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closed.Load() {
		return link.ErrClosed
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	var b rte.Mbufs
	if !l.mbufs(&b, want) {
		l.txDropped.Add(uint64(want))
		return nil
	}
	var icrc [wire.ICRCLen]byte
	ends := ethframe.Ends{SrcMAC: l.st.mac, Src: l.local}
	j := 0
	for i := range pkts {
		if !ok[i] {
			continue
		}
		p := &pkts[i]
		d := b.Data(j, int(b.Len[j])) // the whole room: MaxFrameLen, checked above
		ends.DstMAC, ends.Dst = macs[i], p.Addr
		// The IP versions match (resolve checked); the engine's pieces are even.
		hl, _ := ethframe.HeadersTail(d, &ends, p.Buf[:p.N], p.Tail, &icrc)
		n := hl + copy(d[hl:], p.Buf[:p.N])
		n += copy(d[n:], p.Tail)
		n += copy(d[n:], icrc[:])
		b.Len[j] = uint16(n)
		j++
	}
	l.transmit(&b)
	return nil
}

// mbufs takes n mbufs (with their room in Len) from the spare ones,
// topping those up first if need be; false if the pool has too few. The
// caller holds txMu.
func (l *Link) mbufs(b *rte.Mbufs, n int) bool {
	if l.spare.N < n && l.pool.Alloc(&l.spare, rte.Burst) != nil && l.pool.Alloc(&l.spare, n) != nil {
		return false
	}
	b.Take(&l.spare, n)
	return true
}

// transmit hands b's mbufs to the tx queue, retrying a full queue for up
// to TxWait, and frees those it could not send. The first try also tops
// the spare mbufs up for the next burst, in the same cgo call. The caller
// holds txMu and life.
func (l *Link) transmit(b *rte.Mbufs) {
	sent := 0
	var waited time.Duration
	for try := 0; ; try++ {
		if try == 0 {
			sent = rte.TxRefill(l.port, b, 0, l.pool, &l.spare, rte.Burst)
		} else {
			sent += rte.Tx(l.port, b, sent)
		}
		if sent == b.N || waited >= l.cfg.TxWait {
			break
		}
		if try < 8 {
			runtime.Gosched()
			waited += time.Microsecond
		} else {
			d := min(time.Duration(1<<min(try-8, 10))*time.Microsecond, time.Millisecond)
			time.Sleep(d)
			waited += d
		}
	}
	l.txDropped.Add(uint64(b.N - sent))
	l.sent.Add(uint64(sent))
	rte.FreeTx(b, sent)
}

func (l *Link) checkOpen() error {
	if l.closed.Load() {
		return link.ErrClosed
	}
	return nil
}
