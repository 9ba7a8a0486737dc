package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/netconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, lingerIgnores...)
}

// lingerIgnores are the goroutines of the soft-RoCE device that netconn
// keeps open for 5 s after its last connection closes, so that the next
// connection does not pay for opening it again: the device's receive loop and
// fine clock, and the timer's function should it fire while goleak looks.
var lingerIgnores = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
	goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
	goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
	goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
	// The same for an shm channel: its watcher and the timer that closes it.
	goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/shm.(*Device).watch"),
	goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.(*shmChannel).release.func1"),
}

// recorder keeps what the server saw: the transport of every request's
// connection.
type recorder struct {
	mu   sync.Mutex
	seen []string
}

func (r *recorder) add(tr string) {
	r.mu.Lock()
	r.seen = append(r.seen, tr)
	r.mu.Unlock()
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.seen) == 0 {
		return ""
	}
	return r.seen[len(r.seen)-1]
}

// start serves the example's handler on a netconn listener on loopback and
// returns the base URL and what the server sees.
func start(t *testing.T) (string, *recorder) {
	t.Helper()
	ln, err := netconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer()
	rec := &recorder{}
	inner := srv.Handler
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := connOf(r)
		nc, ok := c.(*netconn.Conn)
		if !ok {
			t.Errorf("server conn is a %T, want *netconn.Conn", c)
			rec.add("?")
		} else {
			rec.add(nc.Transport())
		}
		inner.ServeHTTP(w, r)
	})
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	t.Cleanup(func() {
		srv.Close()
		if err := <-done; !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("Serve: %v", err)
		}
	})
	return "http://" + ln.Addr().String(), rec
}

// rdmaClient returns a netconn client and the conns it dialed.
func rdmaClient(t *testing.T) (*http.Client, func() []*netconn.Conn) {
	var mu sync.Mutex
	var conns []*netconn.Conn
	c := newClient(func(c *netconn.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	})
	t.Cleanup(c.CloseIdleConnections)
	return c, func() []*netconn.Conn {
		mu.Lock()
		defer mu.Unlock()
		return append([]*netconn.Conn(nil), conns...)
	}
}

func fetch(t *testing.T, c *http.Client, url string) (*http.Response, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %s: %q", url, resp.Status, body)
	}
	return resp, body
}

func TestGoClientOverRDMA(t *testing.T) {
	base, rec := start(t)
	client, dialed := rdmaClient(t)
	for i := range 3 { // the second and third requests reuse the conn
		resp, body := fetch(t, client, base+"/")
		if got, want := string(body), "hello over "+loopbackTransport()+"\n"; got != want {
			t.Errorf("request %d: body %q, want %q", i, got, want)
		}
		if tr := resp.Header.Get(TransportHeader); !strings.HasPrefix(tr, "rdma") {
			t.Errorf("request %d: server transport %q, want rdma", i, tr)
		}
		if tr := rec.last(); !strings.HasPrefix(tr, "rdma") {
			t.Errorf("request %d: server handler saw transport %q, want rdma", i, tr)
		}
	}
	conns := dialed()
	if len(conns) != 1 {
		t.Fatalf("client dialed %d conns, want 1 (kept alive)", len(conns))
	}
	if tr := conns[0].Transport(); !strings.HasPrefix(tr, "rdma") {
		t.Errorf("client transport %q (%s), want rdma", tr, conns[0].FallbackReason())
	}
}

func TestPlainClientsServedOverTCP(t *testing.T) {
	base, rec := start(t)

	t.Run("net/http", func(t *testing.T) {
		tr := &http.Transport{} // the default dialer: plain TCP, no rsock preface
		defer tr.CloseIdleConnections()
		resp, body := fetch(t, &http.Client{Transport: tr}, base+"/")
		if got, want := string(body), "hello over tcp\n"; got != want {
			t.Errorf("body %q, want %q", got, want)
		}
		if got := resp.Header.Get(TransportHeader); got != "tcp" {
			t.Errorf("header transport %q, want tcp", got)
		}
		if got := rec.last(); got != "tcp" {
			t.Errorf("server saw transport %q, want tcp", got)
		}
	})

	t.Run("curl", func(t *testing.T) {
		curl, err := exec.LookPath("curl")
		if err != nil {
			t.Skip("curl is not installed (CI installs it): cannot show a non-Go client")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, curl, "--silent", "--show-error", "--fail",
			"--noproxy", "*", "--include", base+"/").Output()
		if err != nil {
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				t.Fatalf("curl: %v: %s", err, ee.Stderr)
			}
			t.Fatalf("curl: %v", err)
		}
		head, body, ok := strings.Cut(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n\n")
		if !ok {
			t.Fatalf("curl output has no header block: %q", out)
		}
		if body != "hello over tcp\n" {
			t.Errorf("curl body %q, want %q", body, "hello over tcp\n")
		}
		if !strings.Contains(strings.ToLower(head), strings.ToLower(TransportHeader)+": tcp") {
			t.Errorf("curl headers lack %s: tcp:\n%s", TransportHeader, head)
		}
		if got := rec.last(); got != "tcp" {
			t.Errorf("server saw transport %q, want tcp", got)
		}
	})

	// The same server still serves an rsock client over RDMA.
	client, _ := rdmaClient(t)
	if _, body := fetch(t, client, base+"/"); string(body) != "hello over "+loopbackTransport()+"\n" {
		t.Errorf("rsock client after plain ones: body %q", body)
	}
}

func TestLargeResponseOverRDMA(t *testing.T) {
	const size = 8 << 20
	base, rec := start(t)
	client, dialed := rdmaClient(t)
	start := time.Now()
	resp, body := fetch(t, client, base+"/bytes?n="+strconv.Itoa(size))
	t.Logf("%d bytes in %v", len(body), time.Since(start))
	if len(body) != size {
		t.Fatalf("got %d bytes, want %d", len(body), size)
	}
	want := make([]byte, size)
	patternAt(0, want)
	if !bytes.Equal(body, want) {
		i := 0
		for body[i] == want[i] {
			i++
		}
		t.Fatalf("body differs from the pattern first at byte %d (sha256 %x, want %x)",
			i, sha256.Sum256(body), sha256.Sum256(want))
	}
	if tr := resp.Header.Get(TransportHeader); !strings.HasPrefix(tr, "rdma") || !strings.HasPrefix(rec.last(), "rdma") {
		t.Errorf("server transport %q / %q, want rdma", tr, rec.last())
	}
	for _, c := range dialed() {
		if !strings.HasPrefix(c.Transport(), "rdma") {
			t.Errorf("client transport %q (%s), want rdma", c.Transport(), c.FallbackReason())
		}
	}
}

func TestBadSize(t *testing.T) {
	base, _ := start(t)
	client, _ := rdmaClient(t)
	resp, err := client.Get(base + "/bytes?n=-1")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("status %s, want 400", resp.Status)
	}
}

func TestRun(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run(nil, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	if out.String() != "hello over "+loopbackTransport()+"\n" {
		t.Errorf("stdout %q", out.String())
	}
	if !strings.Contains(errb.String(), "client transport "+loopbackTransport()+", server transport "+loopbackTransport()) {
		t.Errorf("stderr %q", errb.String())
	}

	// -get against a listener started the way -listen starts it.
	base, _ := start(t)
	out.Reset()
	errb.Reset()
	if err := run([]string{"-get", base + "/"}, &out, &errb); err != nil {
		t.Fatalf("run -get: %v\n%s", err, errb.String())
	}
	if out.String() != "hello over "+loopbackTransport()+"\n" {
		t.Errorf("-get stdout %q", out.String())
	}

	for _, args := range [][]string{{"-listen", "x", "-get", "y"}, {"extra"}, {"-bogus"}} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("run %q: no error", args)
		}
	}
}

// TestServeShutdown runs serve as -listen does and stops it.
func TestServeShutdown(t *testing.T) {
	ln, err := netconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- serve(ctx, newServer(), ln) }()
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after cancel")
	}
}

// TestClientToPlainServer shows the other direction of the fallback: the
// netconn client also works against a server that knows nothing of rsock.
func TestClientToPlainServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newServer()
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	defer func() {
		srv.Close()
		<-done
	}()
	client, dialed := rdmaClient(t)
	for i := range 2 {
		_, body := fetch(t, client, "http://"+ln.Addr().String()+"/")
		if string(body) != "hello over unknown\n" { // the server's conns are not *netconn.Conn
			t.Errorf("request %d: body %q", i, body)
		}
		client.CloseIdleConnections() // dial again: the second knows the server is plain
	}
	conns := dialed()
	if len(conns) != 2 {
		t.Fatalf("dialed %d conns, want 2", len(conns))
	}
	for i, c := range conns {
		if c.Transport() != "tcp" {
			t.Errorf("conn %d: transport %q, want tcp", i, c.Transport())
		}
		t.Logf("conn %d: fallback reason %q", i, c.FallbackReason())
	}
	if conns[0].FallbackReason() == "" {
		t.Error("the first conn gives no reason for its fallback")
	}
}

// loopbackTransport is the transport of an rsock connection over loopback
// with the environment's link: shm (auto's choice on one host), or the
// link RSOCK_LINK names.
func loopbackTransport() string {
	switch os.Getenv("RSOCK_LINK") {
	case "udp":
		return "rdma/softroce/udp"
	case "memif":
		return "rdma/softroce/memif"
	}
	return "rdma/shm"
}
