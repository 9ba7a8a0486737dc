//go:build linux

package rsock

import (
	"fmt"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
)

// BenchmarkLossyStream moves a stream one way between two devices on the
// in-memory pipe link, with random loss on both directions and a fixed
// one-way delay, at RoCE MTU 1024 (a 1500-byte Ethernet path). It isolates
// the engine's loss recovery from the kernel: the same run at 0% loss is
// its clean-path reference. Reported per run: goodput, and per MiB the
// packets sent again and the timeouts.
//
//	go test -run '^$' -bench LossyStream -benchtime 16x ./rsock/
func BenchmarkLossyStream(b *testing.B) {
	for _, loss := range []float64{0, 0.001, 0.01, 0.05, 0.2} {
		for _, gbn := range []bool{false, true} {
			mode := "selective"
			if gbn {
				mode = "gobackn"
			}
			if gbn && loss > 0.01 {
				continue // go-back-N takes minutes there
			}
			b.Run(fmt.Sprintf("loss=%g/%s", loss, mode), func(b *testing.B) {
				benchLossyStream(b, pipe.Faults{Loss: loss, Seed: 3}, gbn)
			})
		}
	}
}

func benchLossyStream(b *testing.B, f pipe.Faults, goBackN bool) {
	n := pipe.NewNetwork(f)
	defer n.Close()
	open := func(ip string) *testDev {
		ep, err := n.Endpoint(netip.MustParseAddrPort(ip + ":0"))
		if err != nil {
			b.Fatal(err)
		}
		d, err := softroce.Open(softroce.Config{Link: ep, MaxMTU: verbs.MTU1024, AckDelay: 200 * time.Microsecond})
		if err != nil {
			b.Fatal(err)
		}
		return &testDev{dev: d}
	}
	da, db := open("10.0.0.1"), open("10.0.0.2")
	defer da.dev.Close()
	defer db.dev.Close()
	cfg := Config{GoBackN: goBackN}
	sa, sb := streamPair(b, da, db, cfg)
	defer sa.Close()
	defer sb.Close()

	const chunk = 256 << 10
	buf := make([]byte, chunk)
	total := int64(b.N) * (1 << 20)
	b.SetBytes(1 << 20)
	done := make(chan error, 1)
	go func() {
		_, err := io.CopyN(io.Discard, sb, total)
		done <- err
	}()
	b.ResetTimer()
	for left := total; left > 0; left -= chunk {
		if _, err := sa.Write(buf[:min(left, chunk)]); err != nil {
			b.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		b.Fatal(err)
	}
	b.StopTimer()
	c := da.dev.Counters()
	c.Add(db.dev.Counters())
	mib := float64(b.N)
	b.ReportMetric(float64(c.Retransmits)/mib, "resent/MiB")
	b.ReportMetric(float64(c.Timeouts)/mib, "timeouts/MiB")
	b.ReportMetric(float64(c.SeqNAKsRecv)/mib, "naks/MiB")
	b.ReportMetric(float64(c.Duplicates)/mib, "dups/MiB")
}
