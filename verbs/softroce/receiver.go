package softroce

import (
	"errors"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
	"runtime"
	"sync"
)

// receiver is the device's receive loop: it reads packets in batches,
// dispatches each to its QP's responder or completer, then sends the
// responses and coalesced ACKs the batch produced.
type receiver struct {
	d    *Device
	in   []link.Packet
	out  []link.Packet
	outN int
	owed []*QP // QPs that owe a coalesced ACK
	// reads are QPs answering a READ whose first burst is in out: their
	// timer, which sends the rest, is armed once out is sent, so that no
	// later burst overtakes it.
	reads []*QP
	// busy is held while a batch is handled and its responses sent, so
	// that Device.Close lets a batch finish before it closes the link.
	busy sync.Mutex
}

// maxResponses bounds the response packets that handling one received
// packet may build: a READ burst and a NAK.
const maxResponses = readBurst + 2

func newReceiver(d *Device, batch int) *receiver {
	rx := &receiver{d: d, in: make([]link.Packet, batch), out: make([]link.Packet, batch+maxResponses), owed: make([]*QP, 0, 64)}
	for _, ps := range [][]link.Packet{rx.in, rx.out} {
		mem := make([]byte, len(ps)*maxPacketLen)
		for i := range ps {
			ps[i].Buf = mem[i*maxPacketLen : (i+1)*maxPacketLen : (i+1)*maxPacketLen]
		}
	}
	return rx
}

func (rx *receiver) loop() {
	defer close(rx.d.rxDone)
	var err error
	if l, ok := rx.d.link.(link.Looper); ok {
		err = l.RecvLoop(rx.in, rx.batch)
	} else {
		for {
			var n int
			if n, err = rx.d.link.Recv(rx.in); err != nil {
				break
			}
			rx.batch(rx.in[:n])
		}
	}
	if err != nil && !errors.Is(err, link.ErrClosed) {
		rx.d.linkDown(err)
	}
}

// batch handles one batch of received packets.
func (rx *receiver) batch(pkts []link.Packet) {
	rx.busy.Lock()
	if !rx.d.linkClosing {
		rx.process(pkts)
	}
	rx.busy.Unlock()
	if rx.d.signalled.Swap(false) {
		// A goroutine woken by a completion of this batch waits,
		// runnable, on this processor: let it run now rather than after
		// this goroutine's next wait for packets (a park, and on a link
		// that is not a link.Looper, often an empty receive call first).
		runtime.Gosched()
	}
}

// process handles a batch of received packets, then sends what they
// produced: responses, NAKs and one coalesced ACK per QP.
func (rx *receiver) process(pkts []link.Packet) {
	rx.d.stats.add(cRecvPackets, uint64(len(pkts)))
	if rx.d.capture != nil {
		rx.d.capture.received(rx.d.link.LocalAddr(), pkts)
	}
	for i := range pkts {
		rx.handle(&pkts[i])
	}
	for i, q := range rx.owed {
		rx.reserve(4)
		q.mu.Lock()
		// The echoes first: their marks and duplicates then count in the
		// round trip that the ACK after them may end.
		q.sendECNEcho(rx)
		q.sendDupEcho(rx)
		q.sendOwedAck(rx)
		q.mu.Unlock()
		rx.owed[i] = nil
	}
	rx.owed = rx.owed[:0]
	rx.flush()
	for i, q := range rx.reads {
		q.mu.Lock()
		q.continueReadLater()
		q.mu.Unlock()
		rx.reads[i] = nil
	}
	rx.reads = rx.reads[:0]
}

// handle checks one packet and hands it to its QP.
func (rx *receiver) handle(p *link.Packet) {
	d := rx.d
	switch p.ICRC {
	case link.ICRCBad:
		d.stats.add(cICRCErrors, 1)
		return
	case link.ICRCUnverified:
		d.stats.add(cICRCUnverified, 1)
	}
	var pkt wire.Packet
	var err error
	if p.Tail != nil {
		pkt, err = wire.ParseSplit(p.Bytes(), p.Tail)
	} else {
		pkt, err = wire.Parse(p.Bytes())
	}
	if err != nil || pkt.BTH.PKey()&0x7fff != 0x7fff {
		d.stats.add(cMalformed, 1)
		return
	}
	q := d.lookupQP(pkt.BTH.DestQP())
	if q == nil {
		d.stats.add(cUnknownQP, 1)
		return
	}
	rx.reserve(maxResponses)
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.closed {
		d.stats.add(cUnknownQP, 1)
		return
	}
	if !q.peer.IsValid() || !q.fromPeer(p.Addr) {
		q.count(cWrongPeer, 1)
		return
	}
	q.stats.add(cRecvPackets, 1)
	if pkt.BTH.Opcode().Flags().Has(wire.FlagRequest) {
		q.noteArrival(pkt.BTH.PSN(), p.Arrived)
		q.noteECN(p.ECN, rx)
		q.respond(&pkt, rx)
	} else {
		q.hold.respArrived = p.Arrived
		q.complete(&pkt)
		q.hold.respArrived = 0
	}
}

// reserve makes room for n more responses, sending those built so far if
// need be. It is called before a QP's lock is taken: no lock is held
// across the system call that sends.
func (rx *receiver) reserve(n int) {
	if rx.outN+n > len(rx.out) {
		rx.flush()
	}
}

// packet returns the next response buffer. The caller reserved it.
func (rx *receiver) packet() *link.Packet {
	if rx.outN == len(rx.out) {
		// Not reserved: a bug, but no reason to lose the response.
		rx.out = append(rx.out, link.Packet{Buf: make([]byte, maxPacketLen)})
	}
	p := &rx.out[rx.outN]
	p.ECN = link.ECNNotECT
	rx.outN++
	return p
}

// unget returns the last buffer from packet unused.
func (rx *receiver) unget() { rx.outN-- }

// flush sends the responses built so far. A link error is counted by
// send: a lost response is recovered by the requester's retries.
func (rx *receiver) flush() {
	_ = rx.d.send(rx.out[:rx.outN])
	rx.outN = 0
}
