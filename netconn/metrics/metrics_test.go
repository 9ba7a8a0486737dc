package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs"
)

// netconn keeps an idle soft-RoCE device open for a few seconds after its
// last connection closes, for the next one; its receive loop, fine clock and linger
// timer are not leaks of this package.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
		// An shm channel outlives its last connection for a few seconds,
		// for the next one between the same two processes.
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/shm.(*Device).watch"),
	)
}

// parse parses the text format with Prometheus' own parser (expfmt, a
// test-only dependency of this package).
func parse(t *testing.T, text string) map[string]float64 {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("the parser rejects the exposition: %v\n%s", err, text)
	}
	got := map[string]float64{}
	for name, f := range fams {
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		if strings.HasSuffix(name, "_total") != (f.GetType().String() == "COUNTER") {
			t.Errorf("%s is a %v", name, f.GetType())
		}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			slices.Sort(labels)
			key := strings.Join(append([]string{name}, labels...), ",")
			if _, dup := got[key]; dup {
				t.Errorf("%s: a second sample with the same labels", key)
			}
			switch {
			case m.GetCounter() != nil:
				got[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				got[key] = m.GetGauge().GetValue()
			}
		}
	}
	return got
}

// TestWriteParses: a state with awkward label values (quotes, backslashes,
// a line feed) comes out as text the parser accepts, with the values and
// labels it went in with.
func TestWriteParses(t *testing.T) {
	st := netconn.State{
		Devices: []netconn.DeviceState{{
			Name: "dev\"1\\\n", Provider: "softroce", Link: "udp",
			Counters: verbs.Counters{SentPackets: 10, Retransmits: 3, SeqNAKsRecv: 2, ICRCErrors: 1,
				ECNCERecv: 7, ECNMarksEchoed: 6, SpuriousTimeouts: 8},
			RegisteredBytes: 1 << 20,
			Conns:           make([]netconn.ConnStats, 2),
		}},
		TCPConns:          make([]netconn.ConnStats, 3),
		Fallbacks:         map[string]uint64{netconn.FallbackDeclined: 4},
		PendingHandshakes: 5,
		RegisteredBytes:   1 << 20,
	}
	var b bytes.Buffer
	if err := Write(&b, st); err != nil {
		t.Fatal(err)
	}
	got := parse(t, b.String())
	dev := ",device=dev\"1\\\n,link=udp,provider=softroce"
	for key, want := range map[string]float64{
		"rsock_device_sent_packets_total" + dev:                  10,
		"rsock_device_retransmits_total" + dev:                   3,
		"rsock_device_seq_naks_received_total" + dev:             2,
		"rsock_device_icrc_errors_total" + dev:                   1,
		"rsock_device_ecn_ce_received_total" + dev:               7,
		"rsock_device_ecn_marks_echoed_total" + dev:              6,
		"rsock_device_spurious_timeouts_total" + dev:             8,
		"rsock_device_connections" + dev:                         2,
		"rsock_device_registered_bytes" + dev:                    1 << 20,
		"rsock_tcp_connections":                                  3,
		"rsock_fallbacks_total,kind=" + netconn.FallbackDeclined: 4,
		"rsock_fallbacks_total,kind=" + netconn.FallbackBusy:     0,
		"rsock_pending_handshakes":                               5,
	} {
		if v, ok := got[key]; !ok || v != want {
			t.Errorf("%q = %v (present %v), want %v", key, v, ok, want)
		}
	}
	if len(got) != len(deviceCounters)+2+5+len(netconn.FallbackKinds) { // per device, then process-wide
		t.Errorf("%d samples: %v", len(got), got)
	}
}

// TestHandler serves the live state of a process with an RDMA conn and
// a TCP fallback over HTTP; the parser accepts it, and it counts both.
func TestHandler(t *testing.T) {
	ln, err := (&netconn.ListenConfig{Provider: netconn.ProviderSoftRoCE}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	off, err := (&netconn.ListenConfig{Provider: netconn.ProviderTCP}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer off.Close()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for _, l := range []net.Listener{ln, off} {
		c, err := (&netconn.Dialer{Provider: netconn.ProviderSoftRoCE}).DialContext(context.Background(), "tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		s, err := l.Accept()
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c, s)
	}
	srv := httptest.NewServer(Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != ContentType {
		t.Errorf("Content-Type %q", ct)
	}
	got := parse(t, string(body))
	var rdma float64
	for k, v := range got {
		if strings.HasPrefix(k, "rsock_device_connections,") {
			rdma += v
		}
	}
	if rdma < 2 || got["rsock_tcp_connections"] < 2 || got["rsock_fallbacks_total,kind="+netconn.FallbackRDMAOff] < 2 {
		t.Errorf("RDMA conns %v, TCP conns %v, rdma_off fallbacks %v; want at least 2 each:\n%s",
			rdma, got["rsock_tcp_connections"], got["rsock_fallbacks_total,kind="+netconn.FallbackRDMAOff], body)
	}
}

func TestEscape(t *testing.T) {
	if got := escapeLabel("a\\b\"c\nd"); got != `a\\b\"c\nd` {
		t.Errorf("escapeLabel: %q", got)
	}
	if got := escapeHelp("a\\b\"c\nd"); got != `a\\b"c\nd` {
		t.Errorf("escapeHelp: %q", got)
	}
}

// TestJSONHandler serves the live state as JSON: it decodes as a
// netconn.State that lists the RDMA conn open on its device.
func TestJSONHandler(t *testing.T) {
	ln, err := (&netconn.ListenConfig{Provider: netconn.ProviderSoftRoCE}).Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	c, err := (&netconn.Dialer{Provider: netconn.ProviderSoftRoCE}).DialContext(context.Background(), "tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	srv := httptest.NewServer(JSONHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var st netconn.State
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		t.Fatal(err)
	}
	local := c.LocalAddr().String()
	for _, d := range st.Devices {
		for _, cs := range d.Conns {
			if cs.Local.String() == local && cs.QPN != 0 {
				return
			}
		}
	}
	t.Errorf("conn %v not in the served devices: %+v", local, st)
}
