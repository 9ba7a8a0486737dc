package netlab

import (
	"strings"
	"testing"

	"github.com/rsock-go/rsock/verbs"
)

func TestParseLoss(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "0.1": 1, "1%": 10, "5": 50, "20": 200, "100": 1000} {
		if got, err := ParseLoss(in); err != nil || got != want {
			t.Errorf("ParseLoss(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "101", "0.05"} {
		if _, err := ParseLoss(in); err == nil {
			t.Errorf("ParseLoss(%q): no error", in)
		}
	}
	if s := FormatLoss(1); s != "0.1%" {
		t.Errorf("FormatLoss(1) = %q", s)
	}
}

func TestParseCounters(t *testing.T) {
	stderr := "something\nrsockbench counters: {\"Retransmits\":7,\"SeqNAKsSent\":3}\nrsockbench client: failed\n"
	c, err := parseCounters(stderr)
	if err != nil || c.Retransmits != 7 || c.SeqNAKsSent != 3 {
		t.Errorf("parseCounters: %+v, %v", c, err)
	}
	if _, err := parseCounters("no counters here\n"); err == nil {
		t.Error("no counters line: no error")
	}
}

func TestWriteGoodputTable(t *testing.T) {
	rows := []GoodputRow{
		{Case: GoodputCase{MTU: 9000, LossPerMille: 10},
			TCP:      TransportRun{ConnTransport: "tcp", GBps: 0.5, Bytes: 100, VerifiedBytes: 100},
			Rsock:    TransportRun{ConnTransport: "rdma/softroce/udp", GBps: 0.25, Bytes: 100, VerifiedBytes: 100},
			Counters: verbs.Counters{Retransmits: 12, SeqNAKsSent: 4, SeqNAKsRecv: 3, Timeouts: 1}, Dropped: [2]uint64{0, 9}},
		{Case: GoodputCase{MTU: 1500, LossPerMille: 200, BothWays: true, IPv6: true},
			TCP:   TransportRun{ConnTransport: "tcp", GBps: 0.001234, Bytes: 100, VerifiedBytes: 100},
			Rsock: TransportRun{TimedOut: true, Err: "timed out after 2m0s"}},
		{Case: GoodputCase{MTU: 1500, LossPerMille: 50}, Err: "not run: -total-timeout reached"},
	}
	var b strings.Builder
	if err := WriteGoodputTable(&b, rows); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{
		"| 9000 | 1% | one-way | 0.500 | 0.250 | 0.50x | 12 | 4/3 | 1 | 0, 9 |",
		"| 1500 | 20% | both-ways (IPv6) | 0.00123 | timeout | — |",
		"| 1500 | 5% | one-way | — | — | — |",
		"- mtu1500/loss20%/both-ways/ipv6 rsock: timed out after 2m0s",
		"- mtu1500/loss5%/one-way/ipv4: not run: -total-timeout reached",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}
