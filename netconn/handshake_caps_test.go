package netconn

import (
	"testing"

	"github.com/rsock-go/rsock/fallback"
)

// TestParamsOfCapabilities: the peer's selective repeat and congestion
// control are read from their own capability bits, each on its own.
func TestParamsOfCapabilities(t *testing.T) {
	for _, tc := range []struct {
		caps   uint32
		sr, cc bool
	}{
		{fallback.CapStream, false, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat, true, false},
		{fallback.CapStream | fallback.CapCongestionControl, false, true},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl, true, true},
	} {
		p := paramsOf(&fallback.Hello{Capabilities: tc.caps})
		if p.SelectiveRepeat != tc.sr || p.CongestionControl != tc.cc {
			t.Errorf("caps %#x: selective repeat %v, congestion control %v; want %v, %v",
				tc.caps, p.SelectiveRepeat, p.CongestionControl, tc.sr, tc.cc)
		}
	}
}
