//go:build linux

package rsock

import (
	"testing"
)

// TestCongestionNegotiated: the stream runs the congestion controller
// (its QP paces) only when both endpoints offer it, and never without
// selective repeat.
func TestCongestionNegotiated(t *testing.T) {
	a, b := devPair(t)
	for _, tc := range []struct {
		name       string
		cfgA, cfgB Config
		paced      bool
	}{
		{"both", Config{}, Config{}, true},
		{"peer without", Config{}, Config{NoCongestionControl: true}, false},
		{"local without", Config{NoCongestionControl: true}, Config{}, false},
		{"go-back-N", Config{GoBackN: true}, Config{}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ea, err := NewEndpoint(a.dev, tc.cfgA)
			if err != nil {
				t.Fatal(err)
			}
			eb, err := NewEndpoint(b.dev, tc.cfgB)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ea.Params().CongestionControl, !tc.cfgA.NoCongestionControl && !tc.cfgA.GoBackN; got != want {
				t.Errorf("endpoint offers congestion control %v, want %v", got, want)
			}
			sa, sb := connectEndpoints(t, ea, eb)
			defer sa.Close()
			defer sb.Close()
			sendVerified(t, sa, sb, 4<<20, 5)
			if rate := sa.Stats().QP.PacingRate; (rate > 0) != tc.paced {
				t.Errorf("pacing rate %d B/s; want paced %v", rate, tc.paced)
			}
		})
	}
}
