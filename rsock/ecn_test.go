//go:build linux

package rsock

import (
	"io"
	"testing"
)

// TestECNNegotiated: a stream's packets go out ECN-capable only when both
// endpoints offer ECN (and congestion control): the receiving side counts
// every request packet ECN-capable then, and none otherwise: toward a
// peer that did not ask for it, nothing is marked (here over the udp link
// on loopback, which writes and reads the IP ECN bits).
func TestECNNegotiated(t *testing.T) {
	a, b := devPair(t)
	for _, tc := range []struct {
		name       string
		cfgA, cfgB Config
		ecn        bool
	}{
		{"both", Config{ECN: true}, Config{ECN: true}, true},
		{"neither (the default)", Config{}, Config{}, false},
		{"peer without", Config{ECN: true}, Config{}, false},
		{"local without", Config{}, Config{ECN: true}, false},
		{"peer without congestion control", Config{ECN: true}, Config{ECN: true, NoCongestionControl: true}, false},
		{"go-back-N", Config{ECN: true, GoBackN: true}, Config{ECN: true}, false},
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
			if got, want := ea.Params().ECN, tc.cfgA.ECN && !tc.cfgA.NoCongestionControl && !tc.cfgA.GoBackN; got != want {
				t.Errorf("endpoint offers ECN %v, want %v", got, want)
			}
			sa, sb := connectEndpoints(t, ea, eb)
			defer sa.Close()
			defer sb.Close()
			data := make([]byte, 2<<20)
			errc := make(chan error, 1)
			go func() {
				_, err := sa.Write(data)
				errc <- err
			}()
			if _, err := io.ReadFull(sb, make([]byte, len(data))); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			cb := sb.Stats().QP.Counters
			ca := sa.Stats().QP.Counters
			t.Logf("B received %d packets, %d ECN-capable; A received %d, %d ECN-capable", cb.RecvPackets, cb.ECNCapableRecv, ca.RecvPackets, ca.ECNCapableRecv)
			// B also receives ACKs of its own requests (credit), which go
			// out Not-ECT as responses do; the data is most of it.
			if tc.ecn && 2*cb.ECNCapableRecv < cb.RecvPackets {
				t.Errorf("negotiated: B received %d packets ECN-capable of %d; want the data's, most", cb.ECNCapableRecv, cb.RecvPackets)
			}
			if !tc.ecn && cb.ECNCapableRecv+ca.ECNCapableRecv != 0 {
				t.Errorf("not negotiated: %d and %d packets arrived ECN-capable, want none", cb.ECNCapableRecv, ca.ECNCapableRecv)
			}
		})
	}
}
