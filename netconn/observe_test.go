package netconn

import (
	"context"
	"encoding/json"
	"expvar"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rsock-go/rsock/verbs/softroce/link"
	"github.com/rsock-go/rsock/verbs/softroce/link/pipe"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
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

// pipeDevices makes the devices that netconn opens from now on use
// endpoints of a pipe network with faults f instead of UDP sockets, one
// device per IP. The returned function restores the UDP link.
func pipeDevices(t *testing.T, f pipe.Faults) *pipe.Network {
	t.Helper()
	net := pipe.NewNetwork(f)
	oldLink, oldMax := listenLink, maxDevices
	listenLink = func(cfg udp.Config) (link.Link, error) {
		ep, err := net.Endpoint(cfg.Addr)
		if err != nil {
			return nil, err
		}
		return udpStandIn{ep}, nil
	}
	maxDevices = func() int { return 1 }
	t.Cleanup(func() {
		listenLink, maxDevices = oldLink, oldMax
		net.Close()
	})
	return net
}

// udpStandIn is a pipe endpoint that stands in for the udp link: the
// plan, which knows the links by name, chose udp.
type udpStandIn struct{ link.Link }

func (udpStandIn) Name() string { return LinkUDP }

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

// TestStatsLossy moves data both ways over a pipe link that loses 3% of
// packets, then checks each conn's Stats against the other end's and the
// device's counters: the bytes match what was moved, and the retransmits,
// timeouts and NAKs of each conn (the only queue pair of its device, one
// for each IP) are its device's.
func TestStatsLossy(t *testing.T) {
	pn := pipeDevices(t, pipe.Faults{Loss: 0.03, Seed: 7})
	ln := listenOn(t, ListenConfig{Provider: ProviderSoftRoCE, Link: LinkUDP}, "127.0.0.3:0")
	cc, sc := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE, Link: LinkUDP})
	c, s := cc.(*Conn), sc.(*Conn)
	defer c.Close()
	defer s.Close()
	if c.Transport() != trUDP || s.Transport() != trUDP {
		t.Fatalf("transports %q, %q, want %s (on the pipe)", c.Transport(), s.Transport(), trUDP)
	}
	const up, down = 3 << 20, 1 << 20
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		if _, err := c.Write(make([]byte, up)); err != nil {
			t.Error(err)
		}
	}()
	go func() {
		defer wg.Done()
		if _, err := s.Write(make([]byte, down)); err != nil {
			t.Error(err)
		}
	}()
	if _, err := io.ReadFull(s, make([]byte, up)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, down)); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	quiet(t, c, s)

	cs, ss := c.Stats(), s.Stats()
	if cs.BytesWritten != up || ss.BytesRead != up || ss.BytesWritten != down || cs.BytesRead != down {
		t.Errorf("bytes: client wrote %d read %d, server wrote %d read %d; want %d and %d",
			cs.BytesWritten, cs.BytesRead, ss.BytesWritten, ss.BytesRead, up, down)
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
	t.Logf("pipe %+v", pn.Stats())
	st := Snapshot()
	for _, x := range []ConnStats{cs, ss} {
		var d *DeviceState
		for i := range st.Devices {
			if st.Devices[i].Name == x.Device {
				d = &st.Devices[i]
			}
		}
		if d == nil || len(d.Conns) != 1 || d.Conns[0].QPN != x.QPN || d.RegisteredBytes == 0 {
			t.Fatalf("snapshot: device %s, want it with conn %d and registered bytes: %+v", x.Device, x.QPN, st.Devices)
		}
		dev := d.Counters
		t.Logf("%s: conn %+v", x.Device, x)
		t.Logf("%s: device %+v", x.Device, dev)
		if dev.Retransmits == 0 || dev.SeqNAKsSent == 0 {
			t.Errorf("%s: 3%% loss and %d retransmits, %d NAKs sent", x.Device, dev.Retransmits, dev.SeqNAKsSent)
		}
		for _, k := range []struct {
			name      string
			conn, dev uint64
		}{
			{"retransmits", x.Retransmits, dev.Retransmits},
			{"timeouts", x.Timeouts, dev.Timeouts},
			{"NAKs sent", x.SeqNAKsSent, dev.SeqNAKsSent},
			{"NAKs received", x.SeqNAKsRecv, dev.SeqNAKsRecv},
			{"RNR NAKs sent", x.RNRNAKsSent, dev.RNRNAKsSent},
			{"RNR NAKs received", x.RNRNAKsRecv, dev.RNRNAKsRecv},
		} {
			if k.conn != k.dev {
				t.Errorf("%s: %s: conn %d, device %d", x.Device, k.name, k.conn, k.dev)
			}
		}
	}
	// A NAK one side sends is one the other receives, unless the NAK
	// itself was lost.
	if cs.SeqNAKsRecv > ss.SeqNAKsSent || ss.SeqNAKsRecv > cs.SeqNAKsSent {
		t.Errorf("NAKs: client received %d of the server's %d, server %d of the client's %d",
			cs.SeqNAKsRecv, ss.SeqNAKsSent, ss.SeqNAKsRecv, cs.SeqNAKsSent)
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

// TestExpvar: the snapshot is published under "rsock" as JSON that lists
// a live RDMA conn on its device.
func TestExpvar(t *testing.T) {
	ln := listen(t, ListenConfig{Provider: ProviderSoftRoCE})
	c, s := connPair(t, ln, &Dialer{Provider: ProviderSoftRoCE})
	defer c.Close()
	defer s.Close()
	v := expvar.Get(ExpvarName)
	if v == nil {
		t.Fatal("nothing published under " + ExpvarName)
	}
	var st State
	if err := json.Unmarshal([]byte(v.String()), &st); err != nil {
		t.Fatalf("%v: %s", err, v.String())
	}
	local := addrPort(c.LocalAddr())
	for _, d := range st.Devices {
		for _, cs := range d.Conns {
			if cs.Local == local && cs.Transport == transport(c) && cs.QPN != 0 {
				return
			}
		}
	}
	t.Errorf("conn %v not in the published devices: %s", local, v.String())
}
