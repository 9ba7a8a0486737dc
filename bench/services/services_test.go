package services

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"
)

func TestParseTransport(t *testing.T) {
	for _, c := range []struct {
		name                 string
		kind, provider, link string
	}{
		{"tcp", KindTCP, "", ""},
		{"unix", KindUnix, "", ""},
		{"rsock", KindRsock, "", ""},
		{"rsock:udp", KindRsock, "", "udp"},
		{"rsock:softroce/memif", KindRsock, "softroce", "memif"},
		{"rsock:rdmacore/", KindRsock, "rdmacore", ""},
		{" rsock:shm ", KindRsock, "", "shm"},
	} {
		tr, err := ParseTransport(c.name)
		if err != nil || tr.Kind != c.kind || tr.Provider != c.provider || tr.Link != c.link || tr.Name != strings.TrimSpace(c.name) {
			t.Errorf("%q: %+v, %v", c.name, tr, err)
		}
	}
	for _, bad := range []string{"", "udp", "tcp:x", "unix:/tmp", "rsock:", "rsock:/", "rsock:a b", "rsock:a/b/c", "rsocket"} {
		if tr, err := ParseTransport(bad); err == nil {
			t.Errorf("%q parsed as %+v", bad, tr)
		}
	}
}

// serve starts svc over tr on loopback and returns its address and the
// server side's tally; the test stops it.
func serve(t *testing.T, svc Service, tr Transport) (string, *Tally) {
	t.Helper()
	ln, err := tr.Listen(context.Background(), "127.0.0.1", t.TempDir(), svc.Name())
	if err != nil {
		t.Fatal(err)
	}
	tally := &Tally{}
	stop, err := svc.Serve(&CountingListener{Listener: ln, Tally: tally})
	if err != nil {
		ln.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Errorf("stop %s over %s: %v", svc.Name(), tr.Name, err)
		}
	})
	return ln.Addr().String(), tally
}

// TestServices runs every service over every transport in this process,
// with several callers, and checks that calls completed with correct
// replies over the connections asked for.
func TestServices(t *testing.T) {
	const callers = 3
	for _, svc := range All {
		for _, name := range []string{"tcp", "unix", "rsock", "rsock:udp"} {
			t.Run(svc.Name()+"/"+name, func(t *testing.T) {
				tr, err := ParseTransport(name)
				if err != nil {
					t.Fatal(err)
				}
				addr, serverTally := serve(t, svc, tr)
				clientTally := &Tally{}
				c, err := svc.NewClient(ClientConfig{Addr: addr, Dial: CountingDial(tr.Dialer(), clientTally), Callers: callers, Size: 100})
				if err != nil {
					t.Fatal(err)
				}
				marks := 0
				r, err := RunLoad(context.Background(), c, Load{Callers: callers, Warmup: 50 * time.Millisecond, Duration: 500 * time.Millisecond,
					Mark: func(bool) { marks++ }})
				if cerr := c.Close(); cerr != nil {
					t.Errorf("close: %v", cerr)
				}
				if err != nil {
					t.Fatalf("load: %v (%+v)", err, r)
				}
				if r.Requests < callers || r.Errors != 0 || r.P50 <= 0 || r.P50 > r.P99 || r.P99 > r.P999 || marks != 2 || r.FirstReplies <= 0 {
					t.Errorf("result %+v, %d marks", r, marks)
				}
				ranOn, reasons := clientTally.Counts()
				t.Logf("%d requests, %.0f/s, p50 %v, p99 %v; first replies after %v; client conns %v", r.Requests, r.ReqPerSec(), r.P50, r.P99, r.FirstReplies, ranOn)
				checkRanOn(t, "client", tr, ranOn, reasons, svc.Name() == "grpc", callers)
				// The server's side of the last connection may still be
				// on its way through Accept.
				deadline := time.Now().Add(2 * time.Second)
				for {
					sRanOn, _ := serverTally.Counts()
					if total(sRanOn) >= total(ranOn) || time.Now().After(deadline) {
						break
					}
					time.Sleep(10 * time.Millisecond)
				}
				sRanOn, sReasons := serverTally.Counts()
				checkRanOn(t, "server", tr, sRanOn, sReasons, svc.Name() == "grpc", callers)
			})
		}
	}
}

func total(m map[string]int) (n int) {
	for _, k := range m {
		n += k
	}
	return n
}

// checkRanOn checks connection counts: what they ran on matches the
// transport, one connection for gRPC, at most one per caller otherwise.
func checkRanOn(t *testing.T, side string, tr Transport, ranOn, reasons map[string]int, one bool, callers int) {
	t.Helper()
	n := total(ranOn)
	if n < 1 || n > callers || (one && n != 1) {
		t.Errorf("%s: %d connections %v", side, n, ranOn)
	}
	for k := range ranOn {
		var ok bool
		switch {
		case tr.Kind != KindRsock:
			ok = k == tr.Kind
		case tr.Link != "":
			ok = strings.HasPrefix(k, "rdma/") && strings.HasSuffix(k, "/"+tr.Link)
		default:
			// The library's default on one host is RDMA of some kind.
			ok = strings.HasPrefix(k, "rdma/")
		}
		if !ok {
			t.Errorf("%s: connections ran on %v (fallbacks %v), want %s", side, ranOn, reasons, tr.Name)
		}
	}
}

// TestCountingListenerClosed: after Close, Accept's error wraps
// net.ErrClosed for every kind of listener, so redcon stops serving.
func TestCountingListenerClosed(t *testing.T) {
	for _, name := range []string{"tcp", "unix", "rsock"} {
		tr, _ := ParseTransport(name)
		ln, err := tr.Listen(context.Background(), "127.0.0.1", t.TempDir(), "x")
		if err != nil {
			t.Fatal(err)
		}
		cl := &CountingListener{Listener: ln, Tally: &Tally{}}
		go func() { time.Sleep(20 * time.Millisecond); cl.Close() }()
		if c, err := cl.Accept(); !errors.Is(err, net.ErrClosed) {
			t.Errorf("%s: Accept after Close: %v, %v", name, c, err)
		}
	}
}
