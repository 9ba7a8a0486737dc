package verbsbench

import (
	"fmt"
	"net/netip"
	"strings"
	"time"
)

// Test names one benchmark.
type Test uint8

// The tests, numbered as they travel in Params.
const (
	TestWriteBW  Test = 1 // RDMA WRITE bandwidth (ib_write_bw)
	TestWriteLat Test = 2 // RDMA WRITE_WITH_IMM ping-pong latency (ib_write_lat)
	TestSendBW   Test = 3 // SEND bandwidth into posted receives (ib_send_bw)
	TestReadBW   Test = 4 // RDMA READ bandwidth from server memory (ib_read_bw)
)

var testNames = [...]string{TestWriteBW: "write_bw", TestWriteLat: "write_lat", TestSendBW: "send_bw", TestReadBW: "read_bw"}

// Tests lists every test in a stable order.
var Tests = []Test{TestWriteBW, TestWriteLat, TestSendBW, TestReadBW}

// Valid reports whether t is a known test.
func (t Test) Valid() bool { return t >= TestWriteBW && t <= TestReadBW }

// Latency reports whether t measures latency rather than bandwidth.
func (t Test) Latency() bool { return t == TestWriteLat }

// String returns the test's name, e.g. "write_bw".
func (t Test) String() string {
	if t.Valid() {
		return testNames[t]
	}
	return fmt.Sprintf("Test(%d)", uint8(t))
}

// ParseTest parses a test name such as "write_bw".
func ParseTest(s string) (Test, error) {
	for _, t := range Tests {
		if testNames[t] == s {
			return t, nil
		}
	}
	names := make([]string, len(Tests))
	for i, t := range Tests {
		names[i] = t.String()
	}
	return 0, fmt.Errorf("unknown test %q (want one of %s)", s, strings.Join(names, ", "))
}

// Defaults for the zero values of Config fields.
const (
	DefaultSize      = 64 << 10
	DefaultMTU       = 4096
	DefaultBWIters   = 5000 // as perftest's bandwidth tests
	DefaultLatIters  = 1000 // as perftest's latency tests
	DefaultTxDepth   = 128
	DefaultRxDepth   = 512
	DefaultCQMod     = 16
	DefaultOuts      = 16
	DefaultTimeout   = 10 * time.Second
	DefaultRoCEAddr  = "127.0.0.1:0"
	maxInline        = 256 // QP inline capacity; smaller latency messages go inline
	maxBufferPerSide = 64 << 20
	maxSlots         = 16
)

// Config is the client's choice of test. Zero fields take the defaults
// above; at most one of Iters and Duration may be set (neither means
// DefaultBWIters or DefaultLatIters iterations).
type Config struct {
	Test     Test
	Size     int // bytes per message
	MTU      int // path MTU in bytes
	Iters    uint64
	Duration time.Duration
	TxDepth  int // sends kept in flight (bandwidth tests)
	RxDepth  int // receives the receiver keeps posted
	CQMod    int // every CQMod-th send is signaled
	Outs     int // READs in flight (read_bw)

	// Provider is the verbs provider: ProviderSoftRoCE (the default) or
	// a registered one such as "rdmacore".
	Provider string
	// RoCE is the local address of the soft-RoCE UDP link. Port 0 means
	// 4791 if free, else an ephemeral port. Default 127.0.0.1:0. With
	// another provider its IP selects the device (the one with a RoCEv2
	// GID for it) and its port is ignored.
	RoCE netip.AddrPort
	// Timeout bounds the control handshake and any stretch without a
	// received packet during the test. Default DefaultTimeout.
	Timeout time.Duration
}

// withDefaults returns c with zero fields set to their defaults.
func (c Config) withDefaults() Config {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.Iters == 0 && c.Duration == 0 {
		c.Iters = DefaultBWIters
		if c.Test.Latency() {
			c.Iters = DefaultLatIters
		}
	}
	if c.TxDepth == 0 {
		c.TxDepth = DefaultTxDepth
	}
	if c.RxDepth == 0 {
		c.RxDepth = DefaultRxDepth
	}
	if c.CQMod == 0 {
		c.CQMod = min(DefaultCQMod, c.TxDepth)
	}
	if c.Outs == 0 {
		c.Outs = DefaultOuts
	}
	if !c.RoCE.IsValid() {
		c.RoCE = netip.MustParseAddrPort(DefaultRoCEAddr)
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// params returns the test settings of c (after withDefaults) as Params,
// without the connection fields.
func (c *Config) params() Params {
	return Params{Test: c.Test, Outs: c.Outs, MTU: c.MTU, Size: c.Size, Iters: c.Iters, Duration: c.Duration,
		TxDepth: c.TxDepth, RxDepth: c.RxDepth, CQMod: c.CQMod}
}

// Check reports the first setting of c (after defaults) that the protocol
// does not allow, in words for a command line user.
func (c Config) Check() error {
	c = c.withDefaults()
	if c.Iters != 0 && c.Duration != 0 {
		return fmt.Errorf("give either iterations or a duration, not both")
	}
	p := c.params()
	// Fill the connection fields with valid stand-ins to check the rest.
	p.QPN, p.GID, p.Port, p.Len = 1, [16]byte{15: 1}, 1, uint64(c.Size)
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%s", strings.TrimPrefix(err.Error(), ErrProtocol.Error()+": "))
	}
	return nil
}

// slotsFor returns how many message-sized slots each side's buffer holds.
func slotsFor(size int) int {
	return max(1, min(maxSlots, maxBufferPerSide/size))
}
