package softroce

import (
	"errors"
	"fmt"
	"syscall"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// txBuffers is a batch of request packet buffers. A QP borrows one from
// its device's pool only while it transmits, so that idle QPs (thousands
// of mostly quiet connections) hold no packet memory.
type txBuffers struct {
	pkts []link.Packet
	n    int // packets built, while queued
	// held is, by packet, the memory region its Tail points into, and
	// refs how many are set.
	held []*MR
	refs int
}

// hold records that packet i points into m's memory (nil: into none),
// letting go of the region it pointed into before.
func (t *txBuffers) hold(i int, m *MR) {
	if old := t.held[i]; old != nil {
		old.sending.Add(-1)
		t.refs--
	}
	if m != nil {
		m.sending.Add(1)
		t.refs++
	}
	t.held[i] = m
}

// release lets go of every region the batch's packets point into.
func (t *txBuffers) release() {
	if t.refs == 0 {
		return
	}
	for i := range t.held {
		t.hold(i, nil)
		t.pkts[i].Tail = nil
	}
}

// putTx returns a batch to the pool.
func (d *Device) putTx(b *txBuffers) {
	b.release()
	d.txPool.Put(b)
}

func newTxBuffers() any {
	t := &txBuffers{pkts: make([]link.Packet, txBatch), held: make([]*MR, txBatch)}
	mem := make([]byte, txBatch*maxPacketLen)
	for i := range t.pkts {
		t.pkts[i].Buf = mem[i*maxPacketLen : (i+1)*maxPacketLen : (i+1)*maxPacketLen]
	}
	return t
}

// borrowTx makes q.tx usable. The caller holds q.mu.
func (q *QP) borrowTx() {
	if q.txb == nil {
		q.txb = q.dev.txPool.Get().(*txBuffers)
		q.tx = q.txb.pkts
		q.txN = 0
	}
}

// queueTx hands the packets built so far to the transmit queue.
func (q *QP) queueTx() {
	if q.txb == nil {
		return
	}
	if q.txN == 0 {
		q.dev.putTx(q.txb)
	} else {
		q.txb.n = q.txN
		q.txq = append(q.txq, q.txb)
	}
	q.txb, q.tx, q.txN = nil, nil, 0
}

// transmit sends the queued packets. The caller holds q.mu; it is
// released during each send, so that the receive loop can process this
// QP's ACKs while the system call runs. Only one goroutine sends for a QP
// at a time (the others leave their packets queued for it), so packets
// leave in PSN order. Call it only where the QP's state may change
// underneath: at the end of an operation.
func (q *QP) transmit() {
	q.queueTx()
	if q.txSending {
		return
	}
	q.txSending = true
	for len(q.txq) > 0 {
		b := q.txq[0]
		copy(q.txq, q.txq[1:])
		q.txq[len(q.txq)-1] = nil
		q.txq = q.txq[:len(q.txq)-1]
		q.mu.Unlock()
		err := q.dev.send(b.pkts[:b.n])
		q.dev.putTx(b)
		q.mu.Lock()
		if err != nil {
			q.onSendError(err)
		}
	}
	q.txSending = false
}

// onSendError handles a failure of the link to send some of the QP's
// packets. A packet too large for the path (EMSGSIZE: the interface's MTU
// shrank below the QP's path MTU) will never pass, so the QP fails with
// that cause; any other failure is taken as a loss, which the QP's
// retries recover, and is kept as the cause if they run out.
func (q *QP) onSendError(err error) {
	if errors.Is(err, link.ErrClosed) {
		return
	}
	q.stats.add(cSendErrors, 1)
	q.sendErr = err
	if errors.Is(err, syscall.EMSGSIZE) && q.attr.State == verbs.QPSRTS {
		q.cause = fmt.Errorf("softroce: the path MTU fell below the QP's %d-byte MTU: %w", q.mtu, err)
		q.fail(q.sqHead, verbs.WCLocLenErr)
	}
}

// dropTx discards packets built or queued and not yet sent.
func (q *QP) dropTx() {
	q.txN = 0
	if q.txb != nil {
		q.txb.release()
	}
	for i, b := range q.txq {
		q.dev.putTx(b)
		q.txq[i] = nil
	}
	q.txq = q.txq[:0]
}
