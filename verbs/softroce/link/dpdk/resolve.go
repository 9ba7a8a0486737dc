//go:build dpdk

package dpdk

import (
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk/internal/rte"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// resolveTimeout bounds how long Send waits for a next hop's MAC; packets
// to an unresolved neighbour are then dropped.
const resolveTimeout = time.Second

// ctlFrame is an ARP or neighbour discovery frame to send.
type ctlFrame struct {
	b  [max(arpFrameLen, ndFrameLen)]byte
	n  int
	nd bool
}

// resolve returns the MAC of dst's next hop, asking with ARP (IPv4) or
// neighbour solicitations (IPv6) and waiting for the answer up to
// resolveTimeout.
func (l *Link) resolve(dst netip.Addr) (wire.MAC, bool) {
	hop, ok := nextHop(l.cfg.Local, l.cfg.Gateway, dst)
	if !ok {
		return wire.MAC{}, false
	}
	var deadline time.Time
	for {
		now := time.Now()
		l.neighMu.Lock()
		mac, st := l.neigh.lookup(hop, now)
		ask := st != neighReachable && l.neigh.ask(hop, now)
		wake := l.neighWake
		l.neighMu.Unlock()
		if ask {
			var f ctlFrame
			if hop.Is4() {
				f.n = l.st.arpFrame(f.b[:], wire.ARPRequest, wire.MAC{}, hop)
			} else {
				f.n, f.nd = l.st.ndSolicit(f.b[:], hop), true
			}
			l.sendFrame(&f)
		}
		if st != neighNone {
			return mac, true
		}
		if deadline.IsZero() {
			deadline = now.Add(resolveTimeout)
		} else if now.After(deadline) {
			return wire.MAC{}, false
		}
		t := time.NewTimer(retransTime)
		select {
		case <-wake:
		case <-t.C:
		case <-l.done:
			t.Stop()
			return wire.MAC{}, false
		}
		t.Stop()
	}
}

// sendFrame transmits an ARP or neighbour discovery frame, if the link
// is open.
func (l *Link) sendFrame(f *ctlFrame) {
	l.life.RLock()
	defer l.life.RUnlock()
	if l.closed.Load() {
		return
	}
	l.txMu.Lock()
	defer l.txMu.Unlock()
	var b rte.Mbufs
	if !l.mbufs(&b, 1) {
		l.txDropped.Add(1)
		return
	}
	copy(b.Data(0, int(b.Len[0])), f.b[:f.n])
	b.Len[0] = uint16(f.n)
	sent := rte.Tx(l.port, &b, 0)
	switch {
	case sent != 1:
		l.txDropped.Add(1)
	case f.nd:
		l.ndOut.Add(1)
	default:
		l.arpOut.Add(1)
	}
	rte.FreeTx(&b, sent)
}
