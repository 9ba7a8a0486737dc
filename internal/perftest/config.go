package perftest

import (
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// Test is one of the perftest programs this package can stand in for.
type Test int

// The tests, named after their perftest programs.
const (
	SendBW   Test = iota // ib_send_bw: SENDs into posted receives
	WriteBW              // ib_write_bw: RDMA WRITEs into the server's buffer
	ReadBW               // ib_read_bw: RDMA READs from the server's buffer
	WriteLat             // ib_write_lat: RDMA WRITE ping-pong, polled in memory
)

var testNames = [...]string{SendBW: "ib_send_bw", WriteBW: "ib_write_bw", ReadBW: "ib_read_bw", WriteLat: "ib_write_lat"}

// String returns the perftest program name.
func (t Test) String() string {
	if t >= 0 && int(t) < len(testNames) {
		return testNames[t]
	}
	return fmt.Sprintf("Test(%d)", int(t))
}

// ParseTest returns the test of a perftest program name.
func ParseTest(name string) (Test, bool) {
	for i, n := range testNames {
		if n == name {
			return Test(i), true
		}
	}
	return 0, false
}

func (t Test) isBW() bool { return t != WriteLat }

// Defaults, as perftest's.
const (
	DefaultTCPPort   = 18515
	DefaultSizeBW    = 65536
	DefaultSizeLat   = 2
	DefaultIters     = 1000
	DefaultItersWB   = 5000 // ib_write_bw's
	DefaultTxDepthBW = 128
	DefaultRxDepth   = 512 // receives an ib_send_bw server keeps posted
	DefaultCQMod     = 100
	// DefaultOutReads is how many READs this side accepts in flight.
	DefaultOutReads = 16
	// DefaultQPTimeout is perftest's local ACK timeout code (67 ms).
	DefaultQPTimeout = 14
	// DefaultTimeout bounds every exchange on the TCP connection and
	// every stretch without progress. Generous: the peer may run under
	// emulation, and a passive server waits out the whole test.
	DefaultTimeout = 5 * time.Minute
	// DefaultLinger keeps the queue pair after the last completion, so
	// the last ACKs go out before it closes.
	DefaultLinger = 250 * time.Millisecond

	pageSize       = 4096 // perftest's cycle buffer: the page size
	cacheLineSize  = 64
	cqModSizeLimit = 8192 // above it perftest signals every request
	minRNRTimer    = 12
	maxSize        = 1 << 23 // perftest's MAX_SIZE
)

// Config is one side's settings. Zero fields take perftest's defaults.
type Config struct {
	Test  Test
	Size  int // bytes per message
	Iters int // messages (bandwidth) or round trips (latency)
	// MTU is the path MTU this side offers; the smaller of both sides'
	// is used. Zero means 4096, the soft-RoCE port's MTU.
	MTU     verbs.MTU
	TxDepth int // requests in flight (bandwidth clients)
	RxDepth int // receives posted (ib_send_bw servers)
	CQMod   int // a bandwidth client signals every CQMod-th request
	// OutReads is how many READs this side accepts in flight as responder.
	OutReads int
	// QPTimeout is the local ACK timeout code, 4.096 µs × 2^QPTimeout;
	// zero means perftest's 14 (67 ms).
	QPTimeout uint8

	// RoCE is the local address of the soft-RoCE UDP link. If invalid,
	// the IP that routes to the peer, port 4791.
	RoCE netip.AddrPort
	// PeerRoCEPort is the UDP port of the peer's RoCE link; zero means
	// 4791. Only in-process tests need another.
	PeerRoCEPort uint16

	Timeout time.Duration
	Linger  time.Duration // negative: none
	// Log receives perftest's address lines and tables; nil discards.
	Log io.Writer
}

// WithDefaults returns c with zero fields set to perftest's defaults and
// the depths clamped as perftest clamps them.
func (c Config) WithDefaults() Config {
	if c.Size == 0 {
		c.Size = DefaultSizeBW
		if c.Test == WriteLat {
			c.Size = DefaultSizeLat
		}
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
		if c.Test == WriteBW {
			c.Iters = DefaultItersWB
		}
	}
	if c.MTU == 0 {
		c.MTU = verbs.MTU4096
	}
	if c.TxDepth == 0 {
		c.TxDepth = DefaultTxDepthBW
		if !c.Test.isBW() {
			c.TxDepth = 1
		}
	}
	if c.RxDepth == 0 {
		c.RxDepth = DefaultRxDepth
	}
	if c.CQMod == 0 {
		c.CQMod = DefaultCQMod
		if c.Size > cqModSizeLimit {
			c.CQMod = 1
		}
	}
	if c.QPTimeout == 0 {
		c.QPTimeout = DefaultQPTimeout
	}
	if c.OutReads == 0 {
		c.OutReads = 1
		if c.Test == ReadBW {
			c.OutReads = DefaultOutReads
		}
	}
	// perftest's own clamps.
	c.TxDepth = min(c.TxDepth, c.Iters)
	c.RxDepth = min(c.RxDepth, c.Iters)
	c.CQMod = min(c.CQMod, c.TxDepth)
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Check reports the first setting of c (after defaults) that is not valid.
func (c Config) Check() error {
	if c.Test < SendBW || c.Test > WriteLat {
		return fmt.Errorf("unknown test %v", c.Test)
	}
	c = c.WithDefaults()
	switch {
	case c.Size < 1 || c.Size > maxSize:
		return fmt.Errorf("size %d out of range 1..%d", c.Size, maxSize)
	case c.Test == WriteLat && c.Size < 1:
		return fmt.Errorf("size %d: ib_write_lat needs at least 1 byte", c.Size)
	case c.Iters < 5:
		return fmt.Errorf("iterations %d: at least 5", c.Iters)
	case c.TxDepth < 1 || c.TxDepth > 1<<14:
		return fmt.Errorf("tx depth %d out of range 1..16384", c.TxDepth)
	case c.RxDepth < 1 || c.RxDepth > 1<<14:
		return fmt.Errorf("rx depth %d out of range 1..16384", c.RxDepth)
	case c.CQMod < 1:
		return fmt.Errorf("cq moderation %d must be positive", c.CQMod)
	case c.OutReads < 1 || c.OutReads > 128:
		return fmt.Errorf("outstanding reads %d out of range 1..128", c.OutReads)
	case c.QPTimeout > 31:
		return fmt.Errorf("QP timeout %d out of range 0..31", c.QPTimeout)
	case c.MTU.Bytes() == 0:
		return fmt.Errorf("MTU code %d: want 1..5 (256..4096 bytes)", c.MTU)
	}
	return nil
}
