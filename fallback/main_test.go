package fallback

import (
	"net/netip"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// testHello returns a valid, typical Hello.
func testHello() *Hello {
	return &Hello{
		Version:      Version,
		Capabilities: CapStream,
		Provider:     "softroce",
		Link:         "udp",
		GID:          netip.MustParseAddr("::ffff:127.0.0.1").As16(),
		UDPPort:      4791,
		QPN:          17,
		PSN:          0x123456,
		MTU:          1024,
		RingAddr:     0x7f00_0000_0000,
		RingRKey:     0xabcd,
		RingSize:     1 << 20,
		RecvDepth:    256,
	}
}
