package netconn

import (
	"strings"
	"testing"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
)

// TestParamsOfCapabilities: the peer's selective repeat, congestion
// control and ECN are read from their own capability bits, each on its
// own, and helloFor writes each back.
func TestParamsOfCapabilities(t *testing.T) {
	for _, tc := range []struct {
		caps        uint32
		sr, cc, ecn bool
	}{
		{fallback.CapStream, false, false, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat, true, false, false},
		{fallback.CapStream | fallback.CapCongestionControl, false, true, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl, true, true, false},
		{fallback.CapStream | fallback.CapECN, false, false, true},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl | fallback.CapECN, true, true, true},
	} {
		p := paramsOf(&fallback.Hello{Capabilities: tc.caps})
		if p.SelectiveRepeat != tc.sr || p.CongestionControl != tc.cc || p.ECN != tc.ecn {
			t.Errorf("caps %#x: selective repeat %v, congestion control %v, ECN %v; want %v, %v, %v",
				tc.caps, p.SelectiveRepeat, p.CongestionControl, p.ECN, tc.sr, tc.cc, tc.ecn)
		}
	}
	if fallback.CapECN != 1<<5 {
		t.Errorf("CapECN is %#x, want bit 5", fallback.CapECN)
	}
}

// TestEnvECN: RSOCK_ECN=off (or 0) sets rsock.Config.NoECN, unset, on or
// 1 leave it clear, and another value is an error naming the variable.
func TestEnvECN(t *testing.T) {
	for v, noECN := range map[string]bool{"": false, "on": false, "1": false, "off": true, "0": true} {
		t.Setenv(EnvECN, v)
		set, err := resolve("", "", rsock.Config{})
		if err != nil || set.stream.NoECN != noECN {
			t.Errorf("RSOCK_ECN=%q: NoECN %v, %v; want %v", v, set.stream.NoECN, err, noECN)
		}
	}
	t.Setenv(EnvECN, "maybe")
	if _, err := resolve("", "", rsock.Config{}); err == nil || !strings.Contains(err.Error(), EnvECN) {
		t.Errorf("RSOCK_ECN=maybe: %v, want an error naming %s", err, EnvECN)
	}
}
