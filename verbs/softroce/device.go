package softroce

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// ProviderName is what Device.Provider returns.
const ProviderName = "softroce"

// maxHeaderLen bounds BTH plus extension headers of any RC packet.
const maxHeaderLen = wire.BTHLen + wire.AtomicETHLen

// maxPacketLen bounds a packet buffer: headers, a 4096-byte payload, and the ICRC.
const maxPacketLen = maxHeaderLen + 4096 + wire.ICRCLen

// Config configures a Device.
type Config struct {
	// Name is the device name; default "softroce0".
	Name string
	// Link carries the packets. The device owns it and closes it on Close.
	Link link.Link
	// MaxMTU is the largest path MTU the link carries; default MTU4096.
	MaxMTU verbs.MTU
	// MaxInflight bounds each QP's unacknowledged request packets. By
	// default (0) a go-back-N QP sends up to 512 and a selective-repeat
	// QP up to half its SACK bitmap: 512 packets, or 2048 with wide SACK
	// (SetWideSACK), bounded further by SetSendWindowLimit.
	MaxInflight int
	// RecvBatch is how many packets the receive loop takes per call;
	// default 64.
	RecvBatch int
	// AckDelay is how long a responder may hold the ACK of light traffic
	// (fewer than 4 unacknowledged packets) so that it covers more. Zero,
	// the default, acknowledges at the end of each receive batch, as RNICs
	// do: a requester that waits for each completion before its next
	// request (perftest's latency tests, ibv_rc_pingpong) would pay the
	// delay on every message. Traffic whose senders never wait on a lone
	// completion (rsock streams) saves a packet and a wake-up per message.
	AckDelay time.Duration
	// Capture, if not nil, records what the device sends and receives as
	// a pcap (see Capture). Several devices may share one; the device
	// does not close it.
	Capture *Capture
	// FineClock runs the QPs' deadlines under 2 ms (the pacer's waits, a
	// held ACK) on a timerfd clock of the device's (Linux; see
	// fineclock.go) instead of runtime timers, which wake an idle
	// process about a millisecond late. Off by default: it measured
	// neutral at a shared bottleneck, and a CI run with it on failed
	// once in TestOperations over memif at MTU 256, not yet explained.
	FineClock bool
}

// Device is a soft-RoCE device: one link, its QPs, MRs and CQs.
type Device struct {
	name        string
	link        link.Link
	port        verbs.PortAttr
	maxInflight int   // Config.MaxInflight; 0 when not set
	ackDelay    int64 // Config.AckDelay in nanoseconds
	capture     *Capture
	// clock wakes QPs at near deadlines (fineclock.go); nil where there
	// is none.
	clock *fineClock

	stats counters

	mrMu  sync.RWMutex
	lkeys map[uint32]*MR
	rkeys map[uint32]*MR

	qpMu sync.RWMutex
	qps  map[uint32]*QP

	objMu  sync.Mutex
	cqs    map[*CQ]struct{}
	closed atomic.Bool

	// txPool lends request packet buffers to transmitting QPs.
	txPool sync.Pool

	rx     *receiver
	rxDone chan struct{}
	// linkClosing is set under rx.busy once Close is about to close the
	// link; later batches are dropped.
	linkClosing bool
	// tailSend is set when the link takes packets in two pieces
	// (link.TailSender): data packets then leave their payload in the
	// registered memory for the link to read.
	tailSend bool
	// signalled is set when a CQ signals its notify channel; the receive
	// loop clears it after each batch and yields if it was set.
	signalled atomic.Bool
}

var _ verbs.Device = (*Device)(nil)

// Open starts a device on cfg.Link.
func Open(cfg Config) (*Device, error) {
	if cfg.Link == nil {
		return nil, fmt.Errorf("softroce: no link: %w", verbs.ErrInvalidArgument)
	}
	if cfg.Name == "" {
		cfg.Name = "softroce0"
	}
	if cfg.MaxMTU == 0 {
		cfg.MaxMTU = verbs.MTU4096
	}
	if cfg.MaxMTU.Bytes() == 0 {
		return nil, fmt.Errorf("softroce: MTU %v: %w", cfg.MaxMTU, verbs.ErrInvalidArgument)
	}
	if cfg.MaxInflight < 0 {
		cfg.MaxInflight = 0
	}
	if cfg.MaxInflight > maxInflightLimit {
		return nil, fmt.Errorf("softroce: MaxInflight %d: %w", cfg.MaxInflight, verbs.ErrInvalidArgument)
	}
	if cfg.RecvBatch <= 0 {
		cfg.RecvBatch = 64
	}
	local := cfg.Link.LocalAddr()
	ts, _ := cfg.Link.(link.TailSender)
	d := &Device{
		tailSend:    ts != nil && ts.SendsTails(),
		name:        cfg.Name,
		link:        cfg.Link,
		maxInflight: cfg.MaxInflight,
		ackDelay:    int64(max(cfg.AckDelay, 0)),
		capture:     cfg.Capture,
		lkeys:       make(map[uint32]*MR),
		rkeys:       make(map[uint32]*MR),
		qps:         make(map[uint32]*QP),
		cqs:         make(map[*CQ]struct{}),
		rxDone:      make(chan struct{}),
		port: verbs.PortAttr{
			State:     verbs.PortActive,
			MaxMTU:    cfg.MaxMTU,
			ActiveMTU: cfg.MaxMTU,
			GIDs:      []verbs.GID{verbs.GIDFromAddr(local.Addr())},
		},
	}
	d.txPool.New = newTxBuffers
	if cfg.FineClock {
		d.clock = newFineClock()
	}
	d.rx = newReceiver(d, cfg.RecvBatch)
	go d.rx.loop()
	return d, nil
}

// Name returns the device name.
func (d *Device) Name() string { return d.name }

// Provider returns "softroce".
func (d *Device) Provider() string { return ProviderName }

// Link returns the link's name, e.g. "udp".
func (d *Device) Link() string { return d.link.Name() }

// LocalAddr is the link address that peers send to. Its port goes into
// AH.DPort at the peer when it is not 4791.
func (d *Device) LocalAddr() netip.AddrPort { return d.link.LocalAddr() }

// Port describes the device's port and GID table.
func (d *Device) Port() verbs.PortAttr {
	p := d.port
	p.GIDs = append([]verbs.GID(nil), p.GIDs...)
	if d.closed.Load() {
		p.State = verbs.PortDown
	}
	return p
}

// Counters returns a snapshot of the device statistics; datagrams its link
// dropped as malformed count under Malformed.
func (d *Device) Counters() verbs.Counters {
	c := d.stats.snapshot()
	if dc, ok := d.link.(link.DropCounter); ok {
		c.Malformed += dc.Dropped()
	}
	return c
}

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	return &PD{dev: d}, nil
}

// CreateCQ creates a completion queue.
func (d *Device) CreateCQ(depth int) (verbs.CQ, error) {
	if depth <= 0 || depth > 1<<22 {
		return nil, fmt.Errorf("softroce: CQ depth %d: %w", depth, verbs.ErrInvalidArgument)
	}
	d.objMu.Lock()
	defer d.objMu.Unlock()
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	c := newCQ(d, depth)
	d.cqs[c] = struct{}{}
	return c, nil
}

// Close destroys every QP, MR and CQ of the device, stops its receive loop
// and closes the link. It is idempotent.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	// QPs first, while the link still sends: each flushes an ACK it owes.
	for _, q := range d.allQPs() {
		q.Close()
	}
	// A batch in progress may hold the ACK of a request whose data the
	// application has already seen (and closed on): let it send that.
	// The link is closed outside busy: a receive loop run by the link
	// (link.Looper) does not return while its batch waits for busy.
	d.rx.busy.Lock()
	d.linkClosing = true
	d.rx.busy.Unlock()
	err := d.link.Close()
	<-d.rxDone
	if d.clock != nil {
		d.clock.close()
	}
	d.mrMu.Lock()
	for _, m := range d.lkeys {
		m.dead = true
	}
	clear(d.lkeys)
	clear(d.rkeys)
	d.mrMu.Unlock()
	d.objMu.Lock()
	for c := range d.cqs {
		c.close()
	}
	clear(d.cqs)
	d.objMu.Unlock()
	if errors.Is(err, link.ErrClosed) {
		err = nil
	}
	return err
}

// linkDown fails every QP once the link failed for good (its receive loop
// ended without Close, as a memif link does when its peer disconnects or
// corrupts the rings): no packet will pass again, so waiting for retries
// to run out would only delay the error. Each QP's Cause names the link's
// failure.
func (d *Device) linkDown(err error) {
	for _, q := range d.allQPs() {
		q.mu.Lock()
		if !q.closed && q.attr.State != verbs.QPSReset && q.attr.State != verbs.QPSErr {
			q.cause = fmt.Errorf("softroce: the %s link failed: %w", d.link.Name(), err)
			q.fail(q.sqHead, verbs.WCRetryExcErr)
		}
		q.mu.Unlock()
	}
}

// allQPs returns the device's QPs.
func (d *Device) allQPs() []*QP {
	d.qpMu.RLock()
	defer d.qpMu.RUnlock()
	qps := make([]*QP, 0, len(d.qps))
	for _, q := range d.qps {
		qps = append(qps, q)
	}
	return qps
}

// lookupQP returns the QP numbered qpn, or nil.
func (d *Device) lookupQP(qpn uint32) *QP {
	d.qpMu.RLock()
	q := d.qps[qpn]
	d.qpMu.RUnlock()
	return q
}

// send hands packets to the link and counts them. A link error is
// counted and returned: the link dropped at least one of the packets.
func (d *Device) send(pkts []link.Packet) error {
	if len(pkts) == 0 {
		return nil
	}
	err := d.link.Send(pkts)
	switch {
	case err == nil:
		d.stats.add(cSentPackets, uint64(len(pkts)))
		if d.capture != nil {
			d.capture.sent(d.link, pkts)
		}
	case !errors.Is(err, link.ErrClosed):
		d.stats.add(cSendErrors, 1)
	}
	return err
}
