package softroce

import (
	"bytes"
	"fmt"
	"sync"
	"testing"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// responseDropLink drops chosen READ response packets on their way out:
// the ones whose place among all READ responses sent (counting from 1) is
// in drop, each once.
type responseDropLink struct {
	link.Link
	mu      sync.Mutex
	sent    int
	drop    map[int]bool
	dropped []uint32 // the PSNs dropped
}

func (l *responseDropLink) Send(pkts []link.Packet) error {
	l.mu.Lock()
	keep := pkts[:0:0]
	for _, p := range pkts {
		op := wire.BTH(p.Buf).Opcode()
		if op.Flags().Has(wire.FlagRead | wire.FlagResponse) {
			l.sent++
			if l.drop[l.sent] {
				delete(l.drop, l.sent)
				l.dropped = append(l.dropped, wire.BTH(p.Buf).PSN())
				continue
			}
		}
		keep = append(keep, p)
	}
	l.mu.Unlock()
	return l.Link.Send(keep)
}

// TestReadResponseLostBehindLaterRead: several READs outstanding at once,
// one response of an early READ lost, and the later READs' responses
// arriving after the gap (their first and last carry an AETH, which
// acknowledges every PSN before them). The lost response must be asked
// for again and accepted; the later READ's acknowledgement must not move
// the acknowledged PSN past it, or the answers to the repeated request
// fall behind it and are dropped as stale until the QP fails. This is the
// hang internal/perftest's ib_read_bw warm-up hit under load.
func TestReadResponseLostBehindLaterRead(t *testing.T) {
	const size, reads = 16 << 10, 8 // 16 packets each at MTU 1024
	for _, selective := range []bool{false, true} {
		for _, lost := range [][]int{{5}, {16}, {1}, {5, 20}, {15, 16, 17}} {
			t.Run(fmt.Sprintf("selective=%v/lost=%v", selective, lost), func(t *testing.T) {
				// An ACK timeout of about 4 s: recovery must come from the
				// gap the later responses show, not from the timer.
				o := pairOpts{mtu: verbs.MTU1024, bufSize: 1 << 20, timeout: 20, selective: selective}
				o.defaults()
				la, lb := pipeLinks.make(t, noFaults)
				drop := &responseDropLink{Link: lb, drop: map[int]bool{}}
				for _, k := range lost {
					drop.drop[k] = true
				}
				a := newNode(t, la, o)
				b := newNode(t, drop, o)
				connect(t, a, b, o)
				for i := range b.buf[:size*reads] {
					b.buf[i] = byte(i*7 + i>>10)
				}
				// Grow the window first, so the READs go out together.
				a.postSend(verbs.SendWR{ID: 100, Opcode: verbs.WRRDMAWrite, Flags: verbs.SendSignaled,
					SGL: []verbs.SGE{a.sge(0, 256<<10)}, RemoteAddr: b.mr.Addr() + 512<<10, RKey: b.mr.RKey()})
				expectWC(t, a.scq, 100, verbs.WCRDMAWrite, verbs.WCSuccess)
				for i := range reads {
					a.postSend(verbs.SendWR{ID: uint64(i), Opcode: verbs.WRRDMARead, Flags: verbs.SendSignaled,
						SGL:        []verbs.SGE{a.sge(512<<10+i*size, size)},
						RemoteAddr: b.mr.Addr() + uint64(i*size), RKey: b.mr.RKey()})
				}
				for i := range reads {
					expectWC(t, a.scq, uint64(i), verbs.WCRDMARead, verbs.WCSuccess)
				}
				if !bytes.Equal(a.buf[512<<10:512<<10+size*reads], b.buf[:size*reads]) {
					t.Fatal("READ data differs")
				}
				drop.mu.Lock()
				n := len(drop.dropped)
				drop.mu.Unlock()
				if n != len(lost) {
					t.Fatalf("dropped %d responses, want %d", n, len(lost))
				}
				c := a.qp.Stats().Counters
				if c.Timeouts != 0 {
					t.Errorf("recovered after %d timeouts, want none (%+v)", c.Timeouts, c)
				}
				// Each loss asks again the READ it hit and those after it,
				// once each; more is a rewind repeated for the same gap.
				if max := uint64(reads * len(lost)); c.Retransmits > max {
					t.Errorf("%d requests sent again for %d lost responses, want at most %d", c.Retransmits, len(lost), max)
				}
			})
		}
	}
}
