package streambench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/netconn"
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

// startServer runs Serve on loopback listeners and returns the main
// address and a function that waits for Serve's result.
func startServer(t *testing.T, cfg ServerConfig) (string, func() error) {
	t.Helper()
	lc := netconn.ListenConfig{} // the library's defaults, as the dialer's
	rln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		rln.Close()
		t.Fatal(err)
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	res := make(chan error, 1)
	go func() { res <- Serve(ctx, rln, tln, cfg) }()
	var got *error
	wait := func() error {
		if got == nil {
			select {
			case err := <-res:
				got = &err
			case <-time.After(15 * time.Second):
				t.Fatal("Serve did not return")
			}
		}
		return *got
	}
	t.Cleanup(func() { cancel(); wait() })
	return rln.Addr().String(), wait
}

func dialClient(t *testing.T, addr string) *Client {
	t.Helper()
	c, err := Dial(context.Background(), ClientConfig{Addr: addr, Timeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSweep measures both modes on both transports and checks the records,
// the tables and the plot.
func TestSweep(t *testing.T) {
	addr, wait := startServer(t, ServerConfig{Sessions: 1})
	c := dialClient(t, addr)
	s := Sweep{Modes: []string{ModeStream, ModePingPong}, Transports: []string{TransportRsock, TransportTCP},
		Sizes: []int{1 << 10, 64 << 10}, Conns: []int{1, 3}, Duration: 60 * time.Millisecond, Iters: 300}
	var progress []string
	s.Progress = func(n, total int, p Point) {
		progress = append(progress, p.Mode+" "+p.Transport)
		if total != 16 || n != len(progress) {
			t.Errorf("progress %d/%d", n, total)
		}
	}
	recs, err := s.Run(context.Background(), c)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
	if len(recs) != 16 {
		t.Fatalf("%d records, want 16", len(recs))
	}
	// Transports alternate in order from one point to the next.
	if recs[0].Transport != TransportRsock || recs[2].Transport != TransportTCP {
		t.Errorf("order: %s then %s", recs[0].Transport, recs[2].Transport)
	}
	for _, r := range recs {
		want := "tcp"
		if r.Transport == TransportRsock {
			want = loopbackTransport()
		}
		if r.ConnTransport != want || r.ServerTransport != want {
			t.Errorf("%s: conn transport %q, server %q, want %q (fallback: %s)", r.Transport, r.ConnTransport, r.ServerTransport, want, r.FallbackReason)
		}
		if r.Bytes == 0 || r.Seconds <= 0 || r.GBps <= 0 || r.ClientCPUSeconds < 0 || r.ServerCPUSeconds < 0 {
			t.Errorf("record %+v", r)
		}
		if r.Mode == ModePingPong {
			if r.RoundTrips == 0 || r.RoundTrips > 300*uint64(r.Conns) || r.Bytes != 2*r.RoundTrips*uint64(r.Size) {
				t.Errorf("ping-pong round trips %d, bytes %d", r.RoundTrips, r.Bytes)
			}
			if r.P50Us <= 0 || r.P50Us > r.P99Us || r.P99Us > r.P999Us {
				t.Errorf("percentiles %v %v %v", r.P50Us, r.P99Us, r.P999Us)
			}
		} else if r.Bytes%uint64(r.Size) != 0 {
			t.Errorf("stream of %d-byte writes moved %d bytes", r.Size, r.Bytes)
		}
		t.Logf("%s %s %s x%d: %.3f GB/s p50 %.1fus cpu %.2f+%.2f s/GB", r.Mode, r.Transport, FormatSize(r.Size), r.Conns,
			r.GBps, r.P50Us, r.ClientCPUPerGB, r.ServerCPUPerGB)
	}

	var tb bytes.Buffer
	WriteTables(&tb, recs)
	out := tb.String()
	t.Logf("\n%s", out)
	for _, s := range []string{"stream throughput", "ping-pong round-trip latency", "64KiB", "rsock/tcp"} {
		if !strings.Contains(out, s) {
			t.Errorf("tables lack %q", s)
		}
	}
	if n := strings.Count(out, "\n"); n != 3+4+1+2+4 {
		t.Errorf("tables have %d lines", n)
	}

	var svg bytes.Buffer
	if err := WritePlot(&svg, recs); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, svg.Bytes(), 8)
}

// checkSVG decodes an SVG document with encoding/xml and counts its lines.
func checkSVG(t *testing.T, b []byte, wantLines int) {
	t.Helper()
	var doc struct {
		XMLName xml.Name
		Width   string `xml:"width,attr"`
		G       []struct {
			Polylines []struct {
				Points string `xml:"points,attr"`
			} `xml:"polyline"`
			Texts []string `xml:"text"`
		} `xml:"g"`
	}
	if err := xml.Unmarshal(b, &doc); err != nil {
		t.Fatalf("SVG is not well-formed XML: %v\n%s", err, b)
	}
	if doc.XMLName.Local != "svg" || doc.XMLName.Space != "http://www.w3.org/2000/svg" || len(doc.G) != 2 {
		t.Fatalf("SVG root %v with %d panels", doc.XMLName, len(doc.G))
	}
	lines := 0
	var texts []string
	for _, g := range doc.G {
		lines += len(g.Polylines)
		texts = append(texts, g.Texts...)
		for _, p := range g.Polylines {
			if p.Points == "" {
				t.Error("empty polyline")
			}
		}
	}
	if lines != wantLines {
		t.Errorf("%d lines, want %d", lines, wantLines)
	}
	for _, s := range []string{"rsock, 1 conn", "tcp, 1 conn"} {
		if !slices.Contains(texts, s) {
			t.Errorf("no legend %q in %q", s, texts)
		}
	}
}

func TestPlotEmptyAndOneMode(t *testing.T) {
	var b bytes.Buffer
	if err := WritePlot(&b, nil); err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(b.Bytes(), new(struct{})); err != nil {
		t.Fatal(err)
	}
	recs := []*Record{
		{Transport: TransportTCP, Mode: ModeStream, Size: 64, Conns: 1, GBps: 0.5},
		{Transport: TransportRsock, Mode: ModeStream, Size: 64, Conns: 1, GBps: 0.25},
		{Transport: TransportTCP, Mode: ModeStream, Size: 1 << 20, Conns: 1, GBps: 3},
		{Transport: TransportRsock, Mode: ModeStream, Size: 1 << 20, Conns: 1, GBps: 2},
	}
	b.Reset()
	if err := WritePlot(&b, recs); err != nil {
		t.Fatal(err)
	}
	checkSVG(t, b.Bytes(), 2)
}

// TestJSONSchema pins the field names of a -json record.
func TestJSONSchema(t *testing.T) {
	r := &Record{Transport: TransportRsock, ConnTransport: "rdma/softroce/udp", ServerTransport: "rdma/softroce/udp",
		Mode: ModeStream, Size: 1024, Conns: 2, Bytes: 2e9, Seconds: 2, ClientCPUSeconds: 1, ServerCPUSeconds: 3,
		ClientProcs: 2, ServerProcs: 1}
	r.finish()
	var b bytes.Buffer
	if err := WriteJSON(&b, []*Record{r, r}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines", len(lines))
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &m); err != nil {
		t.Fatal(err)
	}
	want := []string{"transport", "conn_transport", "server_transport", "mode", "size", "conns", "bytes", "seconds", "gbps",
		"round_trips", "p50_us", "p99_us", "p999_us", "client_cpu_s", "server_cpu_s", "client_cpu_s_per_gb",
		"server_cpu_s_per_gb", "verified_bytes", "client_gomaxprocs", "server_gomaxprocs"}
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	if m["gbps"] != 1.0 || m["client_cpu_s_per_gb"] != 0.5 || m["server_cpu_s_per_gb"] != 1.5 || m["transport"] != "rsock" ||
		m["client_gomaxprocs"] != 2.0 || m["server_gomaxprocs"] != 1.0 {
		t.Errorf("record %v", m)
	}
}

// TestVerify moves verified streams of odd sizes over both transports.
func TestVerify(t *testing.T) {
	addr, wait := startServer(t, ServerConfig{Verify: true, Sessions: 1})
	c := dialClient(t, addr)
	if !c.ServerVerifies() {
		t.Error("server does not announce verification")
	}
	for _, p := range []Point{
		{Mode: ModeStream, Transport: TransportRsock, Size: 1000, Conns: 2, Bytes: 8<<20 + 3},
		{Mode: ModeStream, Transport: TransportTCP, Size: 65537, Conns: 1, Bytes: 8 << 20},
		{Mode: ModeStream, Transport: TransportRsock, Size: 1 << 20, Conns: 1, Duration: 100 * time.Millisecond},
		{Mode: ModePingPong, Transport: TransportRsock, Size: 333, Conns: 2, Iters: 100},
		{Mode: ModePingPong, Transport: TransportTCP, Size: 4096, Conns: 1, Iters: 100},
	} {
		p.Verify, p.Seed = true, 42
		r, err := c.Measure(context.Background(), p)
		if err != nil {
			t.Fatalf("%+v: %v", p, err)
		}
		if r.VerifiedBytes == 0 || (p.Mode == ModeStream && r.VerifiedBytes != r.Bytes) ||
			(p.Mode == ModePingPong && 2*r.VerifiedBytes != r.Bytes) {
			t.Errorf("%s %s: verified %d of %d bytes", p.Mode, p.Transport, r.VerifiedBytes, r.Bytes)
		}
		if p.Bytes > 0 && r.Bytes != uint64(p.Bytes)*uint64(p.Conns) {
			t.Errorf("moved %d bytes, want %d", r.Bytes, p.Bytes*int64(p.Conns))
		}
	}
	c.Close()
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestVerifyDetectsCorruption flips one byte of the client's stream: the
// server reports its offset to the client and Serve returns it.
func TestVerifyDetectsCorruption(t *testing.T) {
	for _, p := range []Point{
		{Mode: ModeStream, Transport: TransportRsock, Size: 64 << 10, Conns: 2, Bytes: 32 << 20, CorruptAt: 5_000_001},
		{Mode: ModeStream, Transport: TransportTCP, Size: 1000, Conns: 1, Bytes: 4 << 20, CorruptAt: 1_234_567},
		{Mode: ModePingPong, Transport: TransportRsock, Size: 100, Conns: 1, Iters: 100, CorruptAt: 777},
	} {
		t.Run(p.Mode+"-"+p.Transport, func(t *testing.T) {
			addr, wait := startServer(t, ServerConfig{Verify: true})
			c := dialClient(t, addr)
			defer c.Close()
			p.Verify, p.Seed, p.Corrupt = true, 7, true
			_, err := c.Measure(context.Background(), p)
			var mm *MismatchError
			if !errors.As(err, &mm) || mm.Conn != 0 || mm.Offset != p.CorruptAt || mm.Got != mm.Want^0xFF {
				t.Fatalf("client: %v", err)
			}
			t.Logf("client: %v", err)
			serr := wait()
			var smm *MismatchError
			if !errors.As(serr, &smm) || *smm != *mm {
				t.Fatalf("Serve returned %v, want %v", serr, mm)
			}
		})
	}
}

// TestServerVerifyRequired: a verifying server refuses a client that does
// not verify.
func TestServerVerifyRequired(t *testing.T) {
	addr, _ := startServer(t, ServerConfig{Verify: true})
	c := dialClient(t, addr)
	defer c.Close()
	_, err := c.Measure(context.Background(), Point{Mode: ModeStream, Transport: TransportTCP, Size: 64, Conns: 1, Bytes: 64})
	if err == nil || !strings.Contains(err.Error(), "-verify") {
		t.Fatalf("got %v", err)
	}
}

// TestServerSurvivesGarbage sends junk and stray data connections before
// a real session.
func TestServerSurvivesGarbage(t *testing.T) {
	addr, wait := startServer(t, ServerConfig{Sessions: 1, Timeout: time.Second})
	for _, junk := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		DataHeader{Session: 1, ID: 1}.Append(nil),
		append(ctlMagic[:], 9, 1, 0, 0),
		append(ctlMagic[:], ProtoVersion, byte(FrameHello), 0xFF, 0xFF),
	} {
		jc, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		jc.Write(junk)
		jc.SetReadDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.Copy(io.Discard, jc); err != nil {
			t.Errorf("junk %q: %v", junk, err)
		}
		jc.Close()
	}
	c := dialClient(t, addr)
	if _, err := c.Measure(context.Background(), Point{Mode: ModePingPong, Transport: TransportRsock, Size: 64, Conns: 1, Iters: 10}); err != nil {
		t.Fatal(err)
	}
	c.Close()
	if err := wait(); err != nil {
		t.Fatal(err)
	}
}

func TestPattern(t *testing.T) {
	whole := make([]byte, 10000)
	NewPattern(5, 1).Fill(whole)
	p := NewPattern(5, 1)
	var parts []byte
	for _, n := range []int{1, 7, 8, 9, 0, 3, 100, 5000, 4872} {
		b := make([]byte, n)
		p.Fill(b)
		parts = append(parts, b...)
	}
	if !bytes.Equal(whole, parts) || p.Offset() != 10000 {
		t.Fatal("chunked fill differs")
	}
	other := make([]byte, 64)
	NewPattern(5, 2).Fill(other)
	if bytes.Equal(other, whole[:64]) {
		t.Error("connections share a pattern")
	}
	v := NewPattern(5, 1)
	if _, _, _, ok := v.Check(whole[:5]); !ok {
		t.Fatal("clean prefix rejected")
	}
	bad := slices.Clone(whole[5:])
	bad[70000%len(bad)] ^= 1
	off, got, want, ok := v.Check(bad)
	if ok || off != 5+int64(70000%len(bad)) || got != want^1 {
		t.Errorf("Check: off %d ok %v", off, ok)
	}
}

func TestParseSizes(t *testing.T) {
	got, err := ParseSizes("64B,1KiB, 16k,64KiB,1MiB,3")
	if err != nil || !slices.Equal(got, []int{64, 1 << 10, 16 << 10, 64 << 10, 1 << 20, 3}) {
		t.Fatalf("%v %v", got, err)
	}
	for _, bad := range []string{"", "0", "-1", "1x", "65MiB", "1,,2", "KiB"} {
		if _, err := ParseSizes(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
	if n, err := ParseSize("1GiB"); err != nil || n != 1<<30 {
		t.Errorf("1GiB: %d %v", n, err)
	}
	for _, n := range []int{64, 1000, 1 << 10, 16 << 10, 1 << 20, 3 << 20} {
		m, err := ParseSize(FormatSize(n))
		if err != nil || m != int64(n) {
			t.Errorf("%d → %q → %d", n, FormatSize(n), m)
		}
	}
}

// loopbackTransport is the transport of an rsock connection over loopback
// with the environment's link: shm (auto's choice on one host) unless
// RSOCK_LINK=udp.
func loopbackTransport() string {
	if os.Getenv("RSOCK_LINK") == "udp" {
		return "rdma/softroce/udp"
	}
	return "rdma/shm"
}
