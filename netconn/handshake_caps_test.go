package netconn

import (
	"testing"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
)

// TestParamsOfCapabilities: the peer's selective repeat, congestion
// control and wide SACK are read from their own capability bits, each on
// its own.
func TestParamsOfCapabilities(t *testing.T) {
	for _, tc := range []struct {
		caps         uint32
		sr, cc, wide bool
	}{
		{fallback.CapStream, false, false, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat, true, false, false},
		{fallback.CapStream | fallback.CapCongestionControl, false, true, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl, true, true, false},
		{fallback.CapStream | fallback.CapWideSACK, false, false, true},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapWideSACK, true, false, true},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl | fallback.CapWideSACK, true, true, true},
		{fallback.CapStream | 1<<5, false, false, false}, // bit 5 is not wide SACK
	} {
		p := paramsOf(&fallback.Hello{Capabilities: tc.caps})
		if p.SelectiveRepeat != tc.sr || p.CongestionControl != tc.cc || p.WideSACK != tc.wide {
			t.Errorf("caps %#x: selective repeat %v, congestion control %v, wide SACK %v; want %v, %v, %v",
				tc.caps, p.SelectiveRepeat, p.CongestionControl, p.WideSACK, tc.sr, tc.cc, tc.wide)
		}
	}
}

// TestHelloCapabilities: the Hello announces wide SACK, bit 6, exactly
// when the endpoint offers it, and it survives the wire.
func TestHelloCapabilities(t *testing.T) {
	if fallback.CapWideSACK != 1<<6 {
		t.Fatalf("CapWideSACK = %#x, want bit 6", fallback.CapWideSACK)
	}
	d := &sharedDevice{dev: helloTestDevice{}}
	for _, wide := range []bool{false, true} {
		p := rsock.Params{SelectiveRepeat: true, WideSACK: wide}
		h := helloFor(d, p)
		if got := h.Capabilities&fallback.CapWideSACK != 0; got != wide {
			t.Errorf("WideSACK %v: Hello capabilities %#x", wide, h.Capabilities)
		}
		if got := paramsOf(h).WideSACK; got != wide {
			t.Errorf("WideSACK %v read back as %v", wide, got)
		}
	}
}

// helloTestDevice names a provider and a link; nothing else is called.
type helloTestDevice struct{ verbs.Device }

func (helloTestDevice) Provider() string { return "softroce" }
func (helloTestDevice) Link() string     { return "udp" }
