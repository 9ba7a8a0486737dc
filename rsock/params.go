package rsock

import (
	"fmt"
	"time"

	"github.com/rsock-go/rsock/ring"
	"github.com/rsock-go/rsock/verbs"
)

// Defaults of Config.
const (
	DefaultRingSize     = 512 << 10
	DefaultRecvDepth    = 64
	DefaultKeepAlive    = 15 * time.Second
	DefaultCloseTimeout = 10 * time.Second
	// DefaultAckTimeout is the local ACK timeout code: 4.096 µs × 2^16 ≈
	// 268 ms, like TCP's minimum RTO. A stream learns that its peer died
	// from the TCP control connection at once; the transport's own
	// timeout only has to survive a receiver that is slow, so it errs
	// long (the engine also doubles it per retry and raises it to the
	// measured round trip).
	DefaultAckTimeout = 16
)

// controlReserve is how many of the peer's receive requests data may not use.
const controlReserve = 4

// Config sizes a stream.
type Config struct {
	// RingSize is the size of the receive ring and of the send ring, a
	// power of two from 4 KiB to 64 MiB. Default DefaultRingSize (netconn
	// picks larger defaults for some links).
	RingSize int
	// RecvDepth is the number of receive work requests kept posted,
	// 8 to 4096. Default DefaultRecvDepth.
	RecvDepth int
	// KeepAlive is the idle time after which a KEEPALIVE is sent, so that a
	// vanished peer is detected by the transport's retries. Negative
	// disables it. Default DefaultKeepAlive.
	KeepAlive time.Duration
	// CloseTimeout bounds how long Close waits for sent data to be
	// acknowledged. Default DefaultCloseTimeout.
	CloseTimeout time.Duration
	// AckTimeout and RetryCount set the QP's local ACK timeout code and
	// retry count. Defaults DefaultAckTimeout and 7.
	AckTimeout uint8
	RetryCount uint8
	// MaxMTU caps the path MTU the endpoint advertises, in bytes of RoCE
	// payload (256 to 4096, rounded down to one of them); 0 means the
	// device's active MTU. netconn sets it from the route to the peer.
	MaxMTU int
	// MaxPacketMTU is the most payload bytes one packet may carry on the
	// route to the peer, a multiple of 64 in 256..4096, where that is more
	// than the largest path MTU the IBTA names that fits (1408 on an
	// Ethernet path of 1500 bytes, whose path MTU is 1024): the endpoint
	// offers it, and where the peer offers one too the connection's
	// packets carry the smaller (verbs.PacketMTUSetter). 0 offers none.
	// netconn sets it from the route to the peer.
	MaxPacketMTU int
	// GoBackN turns selective repeat off even where both sides support
	// it (for comparison; go-back-N is what RNICs and rxe speak).
	GoBackN bool
	// NoCongestionControl turns the congestion controller and pacing off
	// even where both sides support them (for comparison: the window then
	// answers only the rate of loss).
	NoCongestionControl bool
	// ECN offers ECN on top of congestion control: where both sides
	// offer it, requests go out ECT(0) and the controller answers CE
	// marks as DCTCP does (RFC 8257). Off by default: DCTCP's answer
	// belongs in a network whose queues mark early (a datacenter's
	// switches), not in one that also carries flows without ECN, which
	// a marking queue does not slow while it cuts this one each round
	// trip.
	ECN bool
}

func (c *Config) setDefaults() error {
	if c.RingSize == 0 {
		c.RingSize = DefaultRingSize
	}
	if err := ring.CheckSize(c.RingSize); err != nil {
		return err
	}
	if c.RecvDepth == 0 {
		c.RecvDepth = DefaultRecvDepth
	}
	if c.RecvDepth < 8 || c.RecvDepth > 4096 {
		return fmt.Errorf("rsock: receive depth %d not in [8, 4096]", c.RecvDepth)
	}
	if c.KeepAlive == 0 {
		c.KeepAlive = DefaultKeepAlive
	}
	if c.CloseTimeout <= 0 {
		c.CloseTimeout = DefaultCloseTimeout
	}
	if c.AckTimeout == 0 {
		c.AckTimeout = DefaultAckTimeout
	}
	if c.RetryCount == 0 {
		c.RetryCount = 7
	}
	if c.MaxMTU != 0 && (c.MaxMTU < 256 || c.MaxMTU > 1<<20) {
		return fmt.Errorf("rsock: MaxMTU %d not in [256, 1 MiB]", c.MaxMTU)
	}
	if c.MaxPacketMTU != 0 && !validPacketMTU(c.MaxPacketMTU) {
		return fmt.Errorf("rsock: MaxPacketMTU %d is not a multiple of 64 in [256, 4096]", c.MaxPacketMTU)
	}
	if c.AckTimeout > 31 || c.RetryCount > 7 {
		return fmt.Errorf("rsock: ACK timeout %d or retry count %d out of range", c.AckTimeout, c.RetryCount)
	}
	return nil
}

// Params is what one side tells the other to connect: its queue pair and
// its receive ring.
type Params struct {
	GID     verbs.GID
	UDPPort uint16 // soft-RoCE link port; 0 means 4791
	QPN     uint32
	PSN     uint32
	MTU     int // path MTU in bytes
	// SelectiveRepeat says the endpoint's QP can use selective repeat
	// (verbs.SelectiveRepeater); the stream uses it when both sides can.
	SelectiveRepeat bool
	RingAddr        uint64
	RingRKey        uint32
	RingSize        int
	RecvDepth       int

	// CongestionControl says the endpoint's QP can run congestion control
	// (verbs.CongestionController); the stream uses it when both sides
	// can and selective repeat is on.
	CongestionControl bool
	// ECN says the endpoint's QP can use ECN (verbs.ECNReactor); the
	// stream uses it when both sides can and congestion control is on.
	ECN bool
	// WideSACK says the endpoint's QP can track and report up to 4096
	// PSNs past a gap (verbs.WideSACKer); the stream uses it when both
	// sides can and selective repeat is on.
	WideSACK bool
	// DuplicateEcho says the endpoint's QP can echo duplicate requests
	// and undo reductions that spurious resends caused
	// (verbs.DuplicateEchoer); the stream uses it when both sides can and
	// congestion control is on.
	DuplicateEcho bool
	// HoldEcho says the endpoint's QP can echo how long it held requests
	// before it acknowledged them, and tell its controller both hosts'
	// holds (verbs.HoldEchoer); the stream uses it when both sides
	// can and congestion control is on.
	HoldEcho bool
	// PacketMTU is the payload per packet the endpoint's QP can carry
	// beyond MTU (Config.MaxPacketMTU), 0 when it offers none; the stream
	// uses the smaller of the two sides' when both offer one.
	PacketMTU int
}

// validPacketMTU reports whether n is a packet MTU the wire carries: a
// multiple of 64 in 256..4096.
func validPacketMTU(n int) bool { return n >= 256 && n <= 4096 && n%64 == 0 }

// Validate checks a peer's parameters before they are used.
func (p *Params) Validate() error {
	switch {
	case p.QPN == 0 || p.QPN >= 1<<24:
		return fmt.Errorf("rsock: peer QPN %#x out of range", p.QPN)
	case p.PSN >= 1<<24:
		return fmt.Errorf("rsock: peer PSN %#x out of range", p.PSN)
	case verbs.MTUFromBytes(p.MTU).Bytes() != p.MTU:
		return fmt.Errorf("rsock: peer MTU %d is not one of 256..4096", p.MTU)
	case p.PacketMTU != 0 && !validPacketMTU(p.PacketMTU):
		return fmt.Errorf("rsock: peer packet MTU %d is not a multiple of 64 in 256..4096", p.PacketMTU)
	case ring.CheckSize(p.RingSize) != nil:
		return fmt.Errorf("rsock: peer ring size %d: %w", p.RingSize, ring.ErrSize)
	case p.RecvDepth < controlReserve*2 || p.RecvDepth > 65536:
		return fmt.Errorf("rsock: peer receive depth %d out of range", p.RecvDepth)
	case !p.GID.Addr().IsValid() || p.GID.Addr().IsUnspecified():
		return fmt.Errorf("rsock: peer GID %v is not an address", p.GID)
	}
	return nil
}
