package netconn

import (
	"strings"
	"testing"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
	"github.com/rsock-go/rsock/verbs"
)

// TestParamsOfCapabilities: the peer's selective repeat, congestion
// control, wide SACK and ECN are read from their own capability bits,
// each on its own.
func TestParamsOfCapabilities(t *testing.T) {
	for _, tc := range []struct {
		caps              uint32
		sr, cc, wide, ecn bool
	}{
		{fallback.CapStream, false, false, false, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat, true, false, false, false},
		{fallback.CapStream | fallback.CapCongestionControl, false, true, false, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl, true, true, false, false},
		{fallback.CapStream | fallback.CapWideSACK, false, false, true, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapWideSACK, true, false, true, false},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl | fallback.CapWideSACK, true, true, true, false},
		{fallback.CapStream | fallback.CapECN, false, false, false, true},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl | fallback.CapECN, true, true, false, true},
		{fallback.CapStream | fallback.CapSelectiveRepeat | fallback.CapCongestionControl | fallback.CapWideSACK | fallback.CapECN, true, true, true, true},
	} {
		p := paramsOf(&fallback.Hello{Capabilities: tc.caps})
		if p.SelectiveRepeat != tc.sr || p.CongestionControl != tc.cc || p.WideSACK != tc.wide || p.ECN != tc.ecn {
			t.Errorf("caps %#x: selective repeat %v, congestion control %v, wide SACK %v, ECN %v; want %v, %v, %v, %v",
				tc.caps, p.SelectiveRepeat, p.CongestionControl, p.WideSACK, p.ECN, tc.sr, tc.cc, tc.wide, tc.ecn)
		}
	}
}

// TestEchoCapabilities: the Hello announces duplicate echoes, bit 7,
// and hold echoes, bit 9, each exactly when the endpoint offers it, apart
// from every other bit, and the peer's bit is read on its own.
func TestEchoCapabilities(t *testing.T) {
	d := &sharedDevice{dev: helloTestDevice{}}
	for _, c := range []struct {
		name string
		bit  uint32
		want uint32
		set  func(*rsock.Params, bool)
		get  func(rsock.Params) bool
	}{
		{"DuplicateEcho", fallback.CapDuplicateEcho, 1 << 7,
			func(p *rsock.Params, on bool) { p.DuplicateEcho = on }, func(p rsock.Params) bool { return p.DuplicateEcho }},
		{"HoldEcho", fallback.CapHoldEcho, 1 << 9,
			func(p *rsock.Params, on bool) { p.HoldEcho = on }, func(p rsock.Params) bool { return p.HoldEcho }},
	} {
		if c.bit != c.want {
			t.Fatalf("%s: bit %#x, want %#x", c.name, c.bit, c.want)
		}
		for _, on := range []bool{false, true} {
			p := rsock.Params{SelectiveRepeat: true, CongestionControl: true, WideSACK: true}
			c.set(&p, on)
			h := helloFor(d, p)
			if got := h.Capabilities&c.bit != 0; got != on {
				t.Errorf("%s %v: Hello capabilities %#x", c.name, on, h.Capabilities)
			}
			if got := paramsOf(h); c.get(got) != on || !got.WideSACK || !got.CongestionControl {
				t.Errorf("%s %v read back as %+v", c.name, on, got)
			}
		}
		p := paramsOf(&fallback.Hello{Capabilities: fallback.CapStream | c.bit})
		if !c.get(p) || p.CongestionControl || p.WideSACK || p.ECN || p.DuplicateEcho && p.HoldEcho {
			t.Errorf("%s's bit alone read as %+v", c.name, p)
		}
	}
}

// TestHelloCapabilities: the Hello announces wide SACK, bit 6, and ECN,
// bit 5, exactly when the endpoint offers them, and they survive the
// wire.
func TestHelloCapabilities(t *testing.T) {
	if fallback.CapWideSACK != 1<<6 {
		t.Fatalf("CapWideSACK = %#x, want bit 6", fallback.CapWideSACK)
	}
	if fallback.CapECN != 1<<5 {
		t.Fatalf("CapECN = %#x, want bit 5", fallback.CapECN)
	}
	d := &sharedDevice{dev: helloTestDevice{}}
	for _, wide := range []bool{false, true} {
		for _, ecn := range []bool{false, true} {
			p := rsock.Params{SelectiveRepeat: true, CongestionControl: true, WideSACK: wide, ECN: ecn}
			h := helloFor(d, p)
			if got := h.Capabilities&fallback.CapWideSACK != 0; got != wide {
				t.Errorf("WideSACK %v: Hello capabilities %#x", wide, h.Capabilities)
			}
			if got := h.Capabilities&fallback.CapECN != 0; got != ecn {
				t.Errorf("ECN %v: Hello capabilities %#x", ecn, h.Capabilities)
			}
			if got := paramsOf(h); got.WideSACK != wide || got.ECN != ecn {
				t.Errorf("WideSACK %v, ECN %v read back as %v, %v", wide, ecn, got.WideSACK, got.ECN)
			}
		}
	}
}

// helloTestDevice names a provider and a link; nothing else is called.
type helloTestDevice struct{ verbs.Device }

func (helloTestDevice) Provider() string { return "softroce" }
func (helloTestDevice) Link() string     { return "udp" }

// TestEnvECN: RSOCK_ECN=on (or 1) sets rsock.Config.ECN, unset, off or 0
// leave it clear, and another value is an error naming the variable.
func TestEnvECN(t *testing.T) {
	for v, ecn := range map[string]bool{"": false, "off": false, "0": false, "on": true, "1": true} {
		t.Setenv(EnvECN, v)
		set, err := resolve("", "", rsock.Config{})
		if err != nil || set.stream.ECN != ecn {
			t.Errorf("RSOCK_ECN=%q: ECN %v, %v; want %v", v, set.stream.ECN, err, ecn)
		}
	}
	t.Setenv(EnvECN, "maybe")
	if _, err := resolve("", "", rsock.Config{}); err == nil || !strings.Contains(err.Error(), EnvECN) {
		t.Errorf("RSOCK_ECN=maybe: %v, want an error naming %s", err, EnvECN)
	}
}
