package netconn

import (
	"context"
	"expvar"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
	"github.com/rsock-go/rsock/verbs/softroce/wire"
)

// listenOn starts an rsock listener on addr.
func listenOn(t testing.TB, lc ListenConfig, addr string) net.Listener {
	t.Helper()
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

// quiet waits until neither conn has packets in flight, so that no
// counter moves any more.
func quiet(t *testing.T, cs ...*Conn) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		busy := false
		for _, c := range cs {
			if c.Stats().Inflight != 0 {
				busy = true
			}
		}
		if !busy {
			time.Sleep(20 * time.Millisecond) // the last delayed ACK
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("packets still in flight after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// dropLink wraps a link and drops every nth RC SEND or RDMA WRITE packet
// it sends (requests, which only their sender can repair), counting the
// drops by destination QPN: what the test itself took off the wire.
type dropLink struct {
	link.Link
	nth int

	mu      sync.Mutex
	seen    int
	dropped map[uint32]uint64
}

// Name is the udp link's: the plan knows links by name, and chose udp.
func (*dropLink) Name() string { return LinkUDP }

func (l *dropLink) Send(pkts []link.Packet) error {
	keep := make([]link.Packet, 0, len(pkts))
	l.mu.Lock()
	for _, p := range pkts {
		if p.N >= wire.BTHLen {
			bth := wire.BTH(p.Buf[:p.N])
			if op := bth.Opcode(); op >= wire.RCSendFirst && op <= wire.RCWriteOnlyImm {
				l.seen++
				if l.seen%l.nth == 0 {
					l.dropped[bth.DestQP()]++
					continue
				}
			}
		}
		keep = append(keep, p)
	}
	l.mu.Unlock()
	if len(keep) == 0 {
		return nil
	}
	return l.Link.Send(keep)
}

// droppedTo returns how many request packets to qpn were dropped.
func (l *dropLink) droppedTo(qpn uint32) uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped[qpn]
}

// TestStatsLossy runs two connections between the same two devices (one
// for each IP, over a pipe link) and moves data both ways on both, while
// each device's link drops every 30th request packet it sends. Then each
// conn's Stats is checked against what the test observed: the bytes it
// moved, and at least one retransmit for every request packet dropped on
// its way to the peer's QPN; and each device's counters must be the sum
// of its two connections' (so a conn reporting its device's totals, or
// another conn's, fails).
func TestStatsLossy(t *testing.T) {
	pn := pipe.NewNetwork(pipe.Faults{})
	var mu sync.Mutex
	var links []*dropLink
	oldLink, oldMax := listenLink, maxDevices
	listenLink = func(cfg udp.Config) (link.Link, error) {
		ep, err := pn.Endpoint(cfg.Addr)
		if err != nil {
			return nil, err
		}
		l := &dropLink{Link: ep, nth: 30, dropped: map[uint32]uint64{}}
		mu.Lock()
		links = append(links, l)
		mu.Unlock()
		return l, nil
	}
	maxDevices = func() int { return 1 }
	t.Cleanup(func() {
		listenLink, maxDevices = oldLink, oldMax
		pn.Close()
	})
	droppedTo := func(qpn uint32) uint64 {
		mu.Lock()
		defer mu.Unlock()
		var n uint64
		for _, l := range links {
			n += l.droppedTo(qpn)
		}
		return n
	}

	ln := listenOn(t, ListenConfig{Provider: ProviderSoftRoCE, Link: LinkUDP}, "127.0.0.3:0")
	d := &Dialer{Provider: ProviderSoftRoCE, Link: LinkUDP}
	var clients, servers []*Conn
	for range 2 {
		cc, sc := connPair(t, ln, d)
		c, s := cc.(*Conn), sc.(*Conn)
		defer c.Close()
		defer s.Close()
		if c.Transport() != trUDP || s.Transport() != trUDP {
			t.Fatalf("transports %q, %q, want %s (on the pipe)", c.Transport(), s.Transport(), trUDP)
		}
		clients, servers = append(clients, c), append(servers, s)
	}
	const up, down = 2 << 20, 1 << 20
	var wg sync.WaitGroup
	for i := range clients {
		c, s := clients[i], servers[i]
		for _, x := range []struct {
			w, r net.Conn
			n    int
		}{{c, s, up}, {s, c, down}} {
			wg.Add(2)
			go func() {
				defer wg.Done()
				if _, err := x.w.Write(make([]byte, x.n)); err != nil {
					t.Error(err)
				}
			}()
			go func() {
				defer wg.Done()
				if _, err := io.ReadFull(x.r, make([]byte, x.n)); err != nil {
					t.Error(err)
				}
			}()
		}
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	quiet(t, append(clients, servers...)...)

	byQPN := map[uint32]ConnStats{}
	for i := range clients {
		cs, ss := clients[i].Stats(), servers[i].Stats()
		if cs.BytesWritten != up || ss.BytesRead != up || ss.BytesWritten != down || cs.BytesRead != down {
			t.Errorf("conn %d bytes: client wrote %d read %d, server wrote %d read %d; want %d and %d",
				i, cs.BytesWritten, cs.BytesRead, ss.BytesWritten, ss.BytesRead, up, down)
		}
		if cs.Device == "" || ss.Device == "" || cs.Device == ss.Device {
			t.Fatalf("devices %q and %q, want one for each IP", cs.Device, ss.Device)
		}
		if cs.QPN == 0 || cs.DestQPN != ss.QPN || ss.DestQPN != cs.QPN {
			t.Errorf("QPNs: client %d→%d, server %d→%d", cs.QPN, cs.DestQPN, ss.QPN, ss.DestQPN)
		}
		if cs.PathMTU == 0 || cs.PathMTU != ss.PathMTU {
			t.Errorf("path MTUs %d and %d", cs.PathMTU, ss.PathMTU)
		}
		if cs.SRTT <= 0 || ss.SRTT <= 0 || cs.Cwnd <= 0 {
			t.Errorf("srtt %v and %v, cwnd %d: want measured", cs.SRTT, ss.SRTT, cs.Cwnd)
		}
		for _, x := range []ConnStats{cs, ss} {
			byQPN[x.QPN] = x
			// Every request packet dropped on its way to the peer was
			// sent again at least once.
			dropped := droppedTo(x.DestQPN)
			t.Logf("%s QP %d: dropped %d of its requests; retransmits %d, timeouts %d, NAKs %d sent %d received",
				x.Device, x.QPN, dropped, x.Retransmits, x.Timeouts, x.SeqNAKsSent, x.SeqNAKsRecv)
			if dropped == 0 {
				t.Errorf("%s QP %d: none of its requests was dropped: the test's link dropped nothing", x.Device, x.QPN)
			}
			if x.Retransmits < dropped {
				t.Errorf("%s QP %d: %d retransmits for %d dropped requests", x.Device, x.QPN, x.Retransmits, dropped)
			}
		}
	}
	st := Snapshot()
	for _, name := range []string{clients[0].Stats().Device, servers[0].Stats().Device} {
		var d *DeviceState
		for i := range st.Devices {
			if st.Devices[i].Name == name {
				d = &st.Devices[i]
			}
		}
		if d == nil || len(d.Conns) != 2 || d.RegisteredBytes == 0 {
			t.Fatalf("snapshot: device %s, want it with two conns and registered bytes: %+v", name, st.Devices)
		}
		var sum ConnStats
		for _, dc := range d.Conns {
			x, ok := byQPN[dc.QPN]
			if !ok {
				t.Fatalf("snapshot: device %s lists conn %d, not one of the test's", name, dc.QPN)
			}
			sum.Retransmits += x.Retransmits
			sum.Timeouts += x.Timeouts
			sum.SeqNAKsSent += x.SeqNAKsSent
			sum.SeqNAKsRecv += x.SeqNAKsRecv
			sum.RNRNAKsSent += x.RNRNAKsSent
			sum.RNRNAKsRecv += x.RNRNAKsRecv
		}
		dev := d.Counters
		t.Logf("%s: device %+v", name, dev)
		for _, k := range []struct {
			name       string
			conns, dev uint64
		}{
			{"retransmits", sum.Retransmits, dev.Retransmits},
			{"timeouts", sum.Timeouts, dev.Timeouts},
			{"NAKs sent", sum.SeqNAKsSent, dev.SeqNAKsSent},
			{"NAKs received", sum.SeqNAKsRecv, dev.SeqNAKsRecv},
			{"RNR NAKs sent", sum.RNRNAKsSent, dev.RNRNAKsSent},
			{"RNR NAKs received", sum.RNRNAKsRecv, dev.RNRNAKsRecv},
		} {
			if k.conns != k.dev {
				t.Errorf("%s: %s: its conns' sum %d, device %d", name, k.name, k.conns, k.dev)
			}
		}
	}
	// A NAK one side sends is one the other receives, unless the NAK
	// itself was lost (the test drops none).
	for i := range clients {
		cs, ss := clients[i].Stats(), servers[i].Stats()
		if cs.SeqNAKsRecv != ss.SeqNAKsSent || ss.SeqNAKsRecv != cs.SeqNAKsSent {
			t.Errorf("conn %d NAKs: client received %d of the server's %d, server %d of the client's %d",
				i, cs.SeqNAKsRecv, ss.SeqNAKsSent, ss.SeqNAKsRecv, cs.SeqNAKsSent)
		}
	}
}

// TestStatsNoAlloc: Stats allocates nothing, on RDMA and on TCP, and
// neither do a Write and a Read of the data path.
func TestStatsNoAlloc(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates: allocation counts are checked in the run without -race")
	}
	for _, p := range []string{ProviderSoftRoCE, ProviderTCP} {
		ln := listen(t, ListenConfig{Provider: p})
		c, s := connPair(t, ln, &Dialer{Provider: p})
		defer c.Close()
		defer s.Close()
		cn := c.(*Conn)
		if n := testing.AllocsPerRun(100, func() { _ = cn.Stats() }); n != 0 {
			t.Errorf("%s: Stats allocates %v times", cn.Transport(), n)
		}
		buf := make([]byte, 4096)
		if n := testing.AllocsPerRun(100, func() {
			if _, err := c.Write(buf); err != nil {
				t.Fatal(err)
			}
			if _, err := io.ReadFull(s, buf); err != nil {
				t.Fatal(err)
			}
		}); n != 0 {
			t.Errorf("%s: a Write and a Read allocate %v times", cn.Transport(), n)
		}
		if st := cn.Stats(); st.BytesWritten < 101*4096 {
			t.Errorf("%s: %d bytes written, want at least %d", cn.Transport(), st.BytesWritten, 101*4096)
		}
	}
}

// recorder is a slog handler that keeps its records.
type recorder struct {
	mu   sync.Mutex
	recs []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *recorder) WithGroup(string) slog.Handler            { return r }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	r.recs = append(r.recs, rec.Clone())
	r.mu.Unlock()
	return nil
}

// find returns the attributes of the records with message msg.
func (r *recorder) find(msg string) []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.recs {
		if rec.Message != msg {
			continue
		}
		m := map[string]string{}
		rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	return out
}

// TestFallbackLogged: a listener with RDMA off declines an rsock dialer;
// both sides log the fallback with the peer and the reason, and the
// snapshot counts it and lists the conns with their reasons.
func TestFallbackLogged(t *testing.T) {
	rec := &recorder{}
	SetLogger(slog.New(rec))
	defer SetLogger(nil)
	before := Snapshot().Fallbacks[FallbackRDMAOff]
	ln := listen(t, ListenConfig{Provider: ProviderTCP})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
	defer c.Close()
	defer s.Close()
	recs := rec.find("rsock: connection fell back to TCP")
	if len(recs) != 2 {
		t.Fatalf("%d fallback records, want 2 (dial and accept): %v", len(recs), recs)
	}
	for _, r := range recs {
		want := c.RemoteAddr().String()
		if r["side"] == "accept" {
			want = s.RemoteAddr().String()
		}
		if r["peer"] != want || r["kind"] != FallbackRDMAOff || !strings.Contains(r["reason"], "RDMA is turned off") {
			t.Errorf("record %v: want peer %s, kind %s and the reason", r, want, FallbackRDMAOff)
		}
	}
	st := Snapshot()
	if got := st.Fallbacks[FallbackRDMAOff] - before; got != 2 {
		t.Errorf("fallbacks counted %d, want 2", got)
	}
	var reasons int
	for _, cs := range st.TCPConns {
		if cs.Local == addrPort(c.LocalAddr()) || cs.Local == addrPort(s.LocalAddr()) {
			if strings.Contains(cs.FallbackReason, "RDMA is turned off") {
				reasons++
			}
		}
	}
	if reasons != 2 {
		t.Errorf("snapshot lists %d of the two conns with their reason: %+v", reasons, st.TCPConns)
	}
	// Silent again: no more records.
	SetLogger(nil)
	c2, s2 := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
	c2.Close()
	s2.Close()
	if n := len(rec.find("rsock: connection fell back to TCP")); n != 2 {
		t.Errorf("%d records after SetLogger(nil), want still 2", n)
	}
}

// TestConnErrorLogged: a conn whose peer vanishes logs one error record
// with the peer's address.
func TestConnErrorLogged(t *testing.T) {
	rec := &recorder{}
	SetLogger(slog.New(rec))
	defer SetLogger(nil)
	ln := listen(t, ListenConfig{Provider: ProviderSoftRoCE})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
	defer c.Close()
	s.(*Conn).tcp.Close() // the control connection dies without a CLOSE: the peer is gone
	s.(*Conn).stream.Abort(errPeerGone)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(make([]byte, 1)); err == nil {
		t.Fatal("read from a vanished peer succeeded")
	}
	c.Read(make([]byte, 1)) // a second failure is not logged again
	s.Close()
	recs := rec.find("rsock: connection error")
	if len(recs) != 1 || recs[0]["peer"] != c.RemoteAddr().String() || recs[0]["op"] != "read" || recs[0]["error"] == "" {
		t.Fatalf("records %v, want one read error from %v", recs, c.RemoteAddr())
	}
}

// TestNothingPublishedOnImport: importing netconn (and netconn/metrics)
// publishes nothing through expvar and does not import expvar at all,
// whose own init would serve /debug/vars on http.DefaultServeMux; the
// snapshot names addresses and QPNs, and is served only where a program
// mounts it. A live RDMA conn is open, so a lazy registration would show.
func TestNothingPublishedOnImport(t *testing.T) {
	ln := listen(t, ListenConfig{Provider: ProviderSoftRoCE})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
	defer c.Close()
	defer s.Close()
	expvar.Do(func(kv expvar.KeyValue) {
		// This test binary imports expvar, which publishes these two.
		if kv.Key != "cmdline" && kv.Key != "memstats" {
			t.Errorf("%q is published through expvar: %.200s", kv.Key, kv.Value.String())
		}
	})
	goTool := filepath.Join(runtime.GOROOT(), "bin", "go")
	if _, err := os.Stat(goTool); err != nil {
		t.Skipf("no go tool to list the packages' imports: %v", err)
	}
	for _, pkg := range []string{".", "./metrics"} {
		out, err := exec.Command(goTool, "list", "-deps", pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps %s: %v\n%s", pkg, err, out)
		}
		for _, dep := range strings.Fields(string(out)) {
			if dep == "expvar" || dep == "net/http/pprof" {
				t.Errorf("%s imports %s, which serves on http.DefaultServeMux by import", pkg, dep)
			}
		}
	}
}
