package rsock

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
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
			addrA := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			addrB := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 2}
			sa, err := ea.Connect(eb.Params(), ConnectOptions{Net: "tcp", LocalAddr: addrA, RemoteAddr: addrB})
			if err != nil {
				t.Fatal(err)
			}
			defer sa.Close()
			sb, err := eb.Connect(ea.Params(), ConnectOptions{Net: "tcp", LocalAddr: addrB, RemoteAddr: addrA})
			if err != nil {
				t.Fatal(err)
			}
			defer sb.Close()
			data := make([]byte, 4<<20)
			r := rand.New(rand.NewPCG(5, 6))
			for i := range data {
				data[i] = byte(r.Uint32())
			}
			errc := make(chan error, 1)
			go func() {
				_, err := sa.Write(data)
				errc <- err
			}()
			got := make([]byte, len(data))
			if _, err := io.ReadFull(sb, got); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, data) {
				t.Fatal("data differs")
			}
			if rate := sa.Stats().QP.PacingRate; (rate > 0) != tc.paced {
				t.Errorf("pacing rate %d B/s; want paced %v", rate, tc.paced)
			}
		})
	}
}
