package ring

// Producer is the writer's view of the peer's receive ring and receive
// queue.
//
// Bytes: the writer has written Written bytes into the peer's ring, and the
// peer reported that its reader consumed Freed of them; the difference is
// in the ring and the rest is free.
//
// Messages: each RDMA WRITE_WITH_IMM or SEND consumes one receive work
// request at the peer. The peer reposts one for every message it
// processes and reports the count. Reserve of them are kept for control
// messages (credit updates, FIN, CLOSE), so a credit update can always be
// sent even when data has used every other one.
type Producer struct {
	size     uint64
	depth    uint64
	reserve  uint64
	written  uint64
	freed    uint64
	sent     uint64 // messages sent
	returned uint64 // messages the peer reported processed
}

// NewProducer starts the accounting for a peer ring of size bytes and a
// peer receive queue of depth requests, reserve of them for control.
func NewProducer(size, depth, reserve int) *Producer {
	return &Producer{size: uint64(size), depth: uint64(depth), reserve: uint64(reserve)}
}

// Size is the peer's ring size.
func (p *Producer) Size() int { return int(p.size) }

// Written is the producer cursor: bytes written so far.
func (p *Producer) Written() uint64 { return p.written }

// FreeBytes is how many bytes may be written now.
func (p *Producer) FreeBytes() int { return int(p.size - (p.written - p.freed)) }

// inflightMsgs is how many messages the peer has not yet reported.
func (p *Producer) inflightMsgs() uint64 { return p.sent - p.returned }

// CanSendData reports whether a data message may be sent: a receive
// request outside the reserve is free.
func (p *Producer) CanSendData() bool { return p.inflightMsgs()+p.reserve < p.depth }

// CanSendControl reports whether a control message may be sent.
func (p *Producer) CanSendControl() bool { return p.inflightMsgs() < p.depth }

// Wrote records a data message of n bytes. The caller checked FreeBytes
// and CanSendData.
func (p *Producer) Wrote(n int) {
	p.written += uint64(n)
	p.sent++
}

// SentControl records a control message.
func (p *Producer) SentControl() { p.sent++ }

// Update applies a credit report from the peer: the cumulative bytes it
// consumed and messages it processed. Reports may arrive late or repeat;
// only advances count, and claims beyond what was sent are refused.
func (p *Producer) Update(consumed, processed uint64) bool {
	if consumed > p.written || processed > p.sent {
		return false
	}
	if consumed > p.freed {
		p.freed = consumed
	}
	if processed > p.returned {
		p.returned = processed
	}
	return true
}

// Consumer is the reader's view of its own receive ring.
type Consumer struct {
	size         uint64
	depth        uint64
	arrived      uint64 // bytes the peer wrote
	consumed     uint64 // bytes the application read
	reported     uint64 // consumed bytes reported to the peer
	processed    uint64 // messages processed (and their receive requests reposted)
	reportedMsgs uint64 // processed messages reported to the peer
}

// NewConsumer starts the accounting for a receive ring of size bytes and a
// receive queue of depth requests.
func NewConsumer(size, depth int) *Consumer {
	return &Consumer{size: uint64(size), depth: uint64(depth)}
}

// Arrived records a data message of n bytes. It reports false if the
// peer overran the ring, which a correct peer never does.
func (c *Consumer) Arrived(n int) bool {
	if c.arrived+uint64(n)-c.consumed > c.size {
		return false
	}
	c.arrived += uint64(n)
	return true
}

// Processed records one received message whose receive request was reposted.
func (c *Consumer) Processed() { c.processed++ }

// Readable is how many bytes wait to be read.
func (c *Consumer) Readable() int { return int(c.arrived - c.consumed) }

// ReadCursor is where the next unread byte is.
func (c *Consumer) ReadCursor() uint64 { return c.consumed }

// Consume records that the application read n bytes.
func (c *Consumer) Consume(n int) { c.consumed += uint64(n) }

// ShouldReport reports whether a credit update is due: a quarter of the
// ring was freed, or half the receive requests were used, since the last
// report.
func (c *Consumer) ShouldReport() bool {
	return c.consumed-c.reported >= c.size/4 || c.processed-c.reportedMsgs >= c.depth/2
}

// Pending reports whether anything is unreported at all.
func (c *Consumer) Pending() bool {
	return c.consumed != c.reported || c.processed != c.reportedMsgs
}

// Report returns the cumulative counts to send and marks them reported.
func (c *Consumer) Report() (consumed, processed uint64) {
	c.reported, c.reportedMsgs = c.consumed, c.processed
	return c.consumed, c.processed
}
