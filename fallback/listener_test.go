package fallback

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"
)

type acceptResult struct {
	a   Accepted
	err error
	at  time.Time
}

// testListener is a sniffing listener on 127.0.0.1 with one goroutine feeding
// AcceptNegotiation results into a channel.
type testListener struct {
	*Listener
	results chan acceptResult
	done    chan struct{}
}

func newTestListener(t *testing.T, cfg ListenerConfig) *testListener {
	t.Helper()
	return newTestListenerNet(t, "tcp", "127.0.0.1:0", cfg)
}

func newTestListenerNet(t *testing.T, network, addr string, cfg ListenerConfig) *testListener {
	t.Helper()
	inner, err := net.Listen(network, addr)
	if err != nil {
		t.Skipf("listen %s %s: %v", network, addr, err)
	}
	tl := &testListener{
		Listener: NewListener(inner, cfg),
		results:  make(chan acceptResult, 256),
		done:     make(chan struct{}),
	}
	go func() {
		defer close(tl.done)
		for {
			a, err := tl.AcceptNegotiation()
			tl.results <- acceptResult{a, err, time.Now()}
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() {
		tl.Close()
		<-tl.done
		for {
			select {
			case r := <-tl.results:
				if r.a.Conn != nil {
					r.a.Conn.Close()
				}
				continue
			default:
			}
			return
		}
	})
	return tl
}

func (tl *testListener) next(t *testing.T, within time.Duration) acceptResult {
	t.Helper()
	select {
	case r := <-tl.results:
		if r.err != nil {
			t.Fatalf("AcceptNegotiation: %v", r.err)
		}
		t.Cleanup(func() { r.a.Conn.Close() })
		return r
	case <-time.After(within):
		t.Fatalf("nothing accepted within %v", within)
		return acceptResult{}
	}
}

func (tl *testListener) expectNothing(t *testing.T, d time.Duration) {
	t.Helper()
	select {
	case r := <-tl.results:
		t.Fatalf("unexpected accept: hello %+v err %v", r.a.Hello, r.err)
	case <-time.After(d):
	}
}

func dial(t *testing.T, tl *testListener) *net.TCPConn {
	t.Helper()
	c, err := net.Dial(tl.Addr().Network(), tl.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	c.SetDeadline(time.Now().Add(20 * time.Second))
	return c.(*net.TCPConn)
}

func readN(t *testing.T, c net.Conn, n int) []byte {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	b := make([]byte, n)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatalf("read %d bytes: %v (got %q)", n, err, b)
	}
	return b
}

func TestListenerPlainClientImmediate(t *testing.T) {
	for _, req := range []string{
		"GET / HTTP/1.1\r\nHost: example\r\n\r\n",
		"RSOCX partial match then mismatch",
		"R",
	} {
		t.Run(req, func(t *testing.T) {
			tl := newTestListener(t, ListenerConfig{SniffTimeout: 10 * time.Second})
			c := dial(t, tl)
			start := time.Now()
			if _, err := c.Write([]byte(req)); err != nil {
				t.Fatal(err)
			}
			if len(req) == 1 {
				// One matching byte: only a mismatch or EOF ends the sniff early.
				c.Write([]byte("x"))
				req += "x"
			}
			r := tl.next(t, 2*time.Second)
			if d := time.Since(start); d > time.Second {
				t.Fatalf("plain client waited %v", d)
			}
			if r.a.Hello != nil {
				t.Fatal("plain client has a Hello")
			}
			if _, ok := r.a.Conn.(*ReplayConn); !ok {
				t.Fatalf("conn is %T, want *ReplayConn", r.a.Conn)
			}
			if got := readN(t, r.a.Conn, len(req)); string(got) != req {
				t.Fatalf("replayed %q, want %q", got, req)
			}
			// The conn works both ways afterwards.
			r.a.Conn.Write([]byte("HTTP/1.1 200 OK\r\n\r\n"))
			if got := readN(t, c, 19); string(got) != "HTTP/1.1 200 OK\r\n\r\n" {
				t.Fatalf("client read %q", got)
			}
			c.Write([]byte("next"))
			if got := readN(t, r.a.Conn, 4); string(got) != "next" {
				t.Fatalf("server read %q", got)
			}
		})
	}
}

func TestListenerIPv6Loopback(t *testing.T) {
	tl := newTestListenerNet(t, "tcp6", "[::1]:0", ListenerConfig{})
	c := dial(t, tl)
	c.Write([]byte("PING\r\n"))
	r := tl.next(t, 2*time.Second)
	if got := readN(t, r.a.Conn, 6); string(got) != "PING\r\n" || r.a.Hello != nil {
		t.Fatalf("got %q", got)
	}
}

func TestListenerSilentClientAfterTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tl := newTestListener(t, ListenerConfig{SniffTimeout: timeout})
	c := dial(t, tl)
	start := time.Now()
	r := tl.next(t, 5*time.Second)
	d := r.at.Sub(start)
	if d < timeout-5*time.Millisecond {
		t.Fatalf("silent client accepted after %v, before the %v sniff timeout", d, timeout)
	}
	if d > timeout+700*time.Millisecond {
		t.Fatalf("silent client accepted after %v, long after the %v sniff timeout", d, timeout)
	}
	if r.a.Hello != nil || r.a.Conn.(*ReplayConn).Buffered() != 0 {
		t.Fatal("silent client has a hello or replayed bytes")
	}
	// Server speaks first; the conn has no leftover deadline.
	r.a.Conn.Write([]byte("220 ready\r\n"))
	if got := readN(t, c, 11); string(got) != "220 ready\r\n" {
		t.Fatalf("client read %q", got)
	}
	time.Sleep(timeout) // longer than the sniff deadline would have allowed
	c.Write([]byte("HELO\r\n"))
	if got := readN(t, r.a.Conn, 6); string(got) != "HELO\r\n" {
		t.Fatalf("server read %q", got)
	}
}

func TestListenerPartialPrefaceTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tl := newTestListener(t, ListenerConfig{SniffTimeout: timeout})
	c := dial(t, tl)
	start := time.Now()
	c.Write(Preface[:8])
	r := tl.next(t, 5*time.Second)
	if d := r.at.Sub(start); d < timeout-5*time.Millisecond || d > timeout+700*time.Millisecond {
		t.Fatalf("half preface accepted after %v, sniff timeout %v", d, timeout)
	}
	if r.a.Hello != nil {
		t.Fatal("half preface has a Hello")
	}
	c.Write([]byte("rest"))
	want := append(Preface[:8:8], "rest"...)
	if got := readN(t, r.a.Conn, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("replayed %q, want %q", got, want)
	}
}

func TestListenerEOFBeforeMismatch(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 10 * time.Second})
	c := dial(t, tl)
	c.Write(Preface[:5])
	c.CloseWrite()
	r := tl.next(t, 2*time.Second)
	r.a.Conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	got, err := io.ReadAll(r.a.Conn)
	if err != nil || !bytes.Equal(got, Preface[:5]) || r.a.Hello != nil {
		t.Fatalf("got %q, %v", got, err)
	}
	// Writing still works after the client's half-close.
	r.a.Conn.Write([]byte("bye"))
	if got := readN(t, c, 3); string(got) != "bye" {
		t.Fatalf("client read %q", got)
	}
}

func TestListenerRsockClient(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 10 * time.Second})
	c := dial(t, tl)
	h := testHello()
	// Preface, Hello and the first fallback data bytes in one segment: the
	// listener must not swallow the data.
	b := append(Preface[:], AppendHello(nil, h)...)
	b = append(b, "first data"...)
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	r := tl.next(t, 2*time.Second)
	if !reflect.DeepEqual(r.a.Hello, h) {
		t.Fatalf("hello %+v, want %+v", r.a.Hello, h)
	}
	if _, ok := r.a.Conn.(*ReplayConn); ok {
		t.Fatal("rsock conn wrapped in a ReplayConn")
	}
	server := testHello()
	server.QPN = 99
	if err := WriteReply(r.a.Conn, &Reply{Accept: true, Hello: server}); err != nil {
		t.Fatal(err)
	}
	rep, err := ReadReply(c)
	if err != nil || !rep.Accept || !reflect.DeepEqual(rep.Hello, server) {
		t.Fatalf("reply %+v, %v", rep, err)
	}
	if got := readN(t, r.a.Conn, 10); string(got) != "first data" {
		t.Fatalf("server read %q", got)
	}
}

func TestListenerRsockDecline(t *testing.T) {
	// The caller declines (e.g. no provider); the TCP conn carries on as fallback.
	tl := newTestListener(t, ListenerConfig{})
	c := dial(t, tl)
	if err := WritePrefaceAndHello(c, testHello()); err != nil {
		t.Fatal(err)
	}
	r := tl.next(t, 2*time.Second)
	if err := WriteReply(r.a.Conn, Decline("no usable provider")); err != nil {
		t.Fatal(err)
	}
	rep, err := ReadReply(c)
	if err != nil || rep.Accept || rep.Reason != "no usable provider" {
		t.Fatalf("reply %+v, %v", rep, err)
	}
	c.Write([]byte("tcp data"))
	if got := readN(t, r.a.Conn, 8); string(got) != "tcp data" {
		t.Fatalf("got %q", got)
	}
}

func TestListenerBadHelloDeclined(t *testing.T) {
	badMTU := testHello()
	badMTU.MTU = 300
	validFrame := AppendHello(nil, testHello())
	wrongVer := append(Preface[:], validFrame...)
	wrongVer[prefaceVerIdx] = 2
	frameV2 := append(Preface[:], validFrame...)
	frameV2[len(Preface)+3] = 2
	cases := []struct {
		name      string
		send      []byte
		closeSend bool
		reason    string
	}{
		{"random bytes", append(Preface[:], "\x01\x02garbage garbage garbage garbage"...), false, "not an rsock frame"},
		{"MTU 300", append(Preface[:], AppendHello(nil, badMTU)...), false, "MTU"},
		{"truncated", append(Preface[:], validFrame[:20]...), true, "unexpected EOF"},
		{"stalled", append(Preface[:], validFrame[:20]...), false, "handshake timeout"},
		{"preface version", wrongVer, false, "version"},
		{"frame version", frameV2, false, "version"},
		{"huge length", append(Preface[:], 0xD2, 0xCB, 0, 1, 1, 0, 0xFF, 0xFF), false, "exceeds"},
		{"lots of junk", append(Preface[:], bytes.Repeat([]byte{0xD2, 0xCB, 0, 1, 1, 0, 0xFF, 0xFF}, 4000)...), false, "exceeds"},
	}
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 10 * time.Second, HandshakeTimeout: 300 * time.Millisecond})
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tl)
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			if tc.closeSend {
				c.CloseWrite()
			}
			rep, err := ReadReply(c)
			if err != nil {
				t.Fatalf("ReadReply: %v", err)
			}
			if rep.Accept || !strings.Contains(rep.Reason, tc.reason) {
				t.Fatalf("reply %+v, want a Decline mentioning %q", rep, tc.reason)
			}
			// Then the listener closes the conn.
			if rest, err := io.ReadAll(c); err != nil || len(rest) != 0 {
				t.Fatalf("after decline: %q, %v; want EOF", rest, err)
			}
		})
	}
	tl.expectNothing(t, 100*time.Millisecond)
	// The listener still works and surfaces the next good client.
	c := dial(t, tl)
	c.Write([]byte("GET /"))
	if r := tl.next(t, 2*time.Second); r.a.Hello != nil || string(readN(t, r.a.Conn, 5)) != "GET /" {
		t.Fatal("next client not surfaced correctly")
	}
}

func TestListenerManyConcurrentMixed(t *testing.T) {
	const n = 50
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 200 * time.Millisecond, HandshakeTimeout: 2 * time.Second})
	type outcome struct {
		kind string
		id   int
	}
	var wg sync.WaitGroup
	errs := make(chan error, n)
	surfaced := 0
	for i := 0; i < n; i++ {
		kind := []string{"plain", "rsock", "silent", "garbage", "partial"}[i%5]
		if kind != "garbage" {
			surfaced++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := func() error {
				c, err := net.Dial("tcp", tl.Addr().String())
				if err != nil {
					return err
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(20 * time.Second))
				switch kind {
				case "plain":
					fmt.Fprintf(c, "PLAIN %03d\n", i)
				case "partial":
					c.Write(Preface[:10])
					time.Sleep(300 * time.Millisecond)
					fmt.Fprintf(c, "PART %03d\n", i)
				case "rsock":
					h := testHello()
					h.QPN = uint32(1000 + i)
					if err := WritePrefaceAndHello(c, h); err != nil {
						return err
					}
					rep, err := ReadReply(c)
					if err != nil || !rep.Accept || rep.Hello.QPN != uint32(2000+i) {
						return fmt.Errorf("client %d: reply %+v, %v", i, rep, err)
					}
				case "garbage":
					c.Write(append(Preface[:], "junk junk junk"...))
					rep, err := ReadReply(c)
					if err != nil || rep.Accept {
						return fmt.Errorf("client %d: reply %+v, %v", i, rep, err)
					}
					return nil
				}
				// Every surfaced client gets a goodbye line echoing its id.
				line := make([]byte, 8)
				if _, err := io.ReadFull(c, line); err != nil {
					return fmt.Errorf("client %d (%s): %v", i, kind, err)
				}
				if want := fmt.Sprintf("BYE %03d\n", i); kind != "silent" && string(line) != want {
					return fmt.Errorf("client %d: got %q want %q", i, line, want)
				}
				return nil
			}()
			if err != nil {
				errs <- err
			}
		}()
	}
	seen := map[outcome]bool{}
	for k := 0; k < surfaced; k++ {
		r := tl.next(t, 10*time.Second)
		conn := r.a.Conn
		conn.SetDeadline(time.Now().Add(10 * time.Second))
		var o outcome
		switch {
		case r.a.Hello != nil:
			o = outcome{"rsock", int(r.a.Hello.QPN) - 1000}
			reply := testHello()
			reply.QPN = uint32(2000 + o.id)
			if err := WriteReply(conn, &Reply{Accept: true, Hello: reply}); err != nil {
				t.Fatal(err)
			}
		case conn.(*ReplayConn).Buffered() == 0:
			o = outcome{"silent", -k}
		default:
			line := make([]byte, 10)
			if _, err := io.ReadFull(conn, line); err != nil {
				t.Fatal(err)
			}
			if bytes.Equal(line, Preface[:10]) {
				line = make([]byte, 9)
				if _, err := io.ReadFull(conn, line); err != nil {
					t.Fatal(err)
				}
				fmt.Sscanf(string(line), "PART %03d\n", &o.id)
				o.kind = "partial"
			} else {
				fmt.Sscanf(string(line), "PLAIN %03d\n", &o.id)
				o.kind = "plain"
			}
		}
		if seen[o] {
			t.Fatalf("duplicate %+v", o)
		}
		seen[o] = true
		fmt.Fprintf(conn, "BYE %03d\n", o.id)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	counts := map[string]int{}
	for o := range seen {
		counts[o.kind]++
	}
	if counts["plain"] != 10 || counts["rsock"] != 10 || counts["silent"] != 10 || counts["partial"] != 10 {
		t.Fatalf("counts %v", counts)
	}
	tl.expectNothing(t, 50*time.Millisecond)
}

func TestListenerStalledSniffDoesNotBlockOthers(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{SniffTimeout: 5 * time.Second, HandshakeTimeout: 5 * time.Second})
	stalled := dial(t, tl)
	stalled.Write(Preface[:8]) // half a preface, then nothing
	stalledHello := dial(t, tl)
	stalledHello.Write(append(Preface[:], 0xD2, 0xCB)) // full preface, stalled hello
	time.Sleep(50 * time.Millisecond)
	start := time.Now()
	c := dial(t, tl)
	c.Write([]byte("GET /fast"))
	r := tl.next(t, 2*time.Second)
	if d := time.Since(start); d > 500*time.Millisecond {
		t.Fatalf("accept took %v behind a stalled sniff", d)
	}
	if string(readN(t, r.a.Conn, 9)) != "GET /fast" {
		t.Fatal("wrong conn")
	}
}

func TestListenerCloseUnblocksAndClosesPending(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner, ListenerConfig{SniffTimeout: 30 * time.Second})
	addr := inner.Addr().String()
	accepted := make(chan error, 1)
	go func() {
		// The first plain client below is accepted here; keep accepting until closed.
		for {
			a, err := l.AcceptNegotiation()
			if err != nil {
				accepted <- err
				return
			}
			a.Conn.Close()
		}
	}()
	// A client stuck in sniffing, and one stuck reading its Hello.
	sniffing, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer sniffing.Close()
	sniffing.Write(Preface[:3])
	handshaking, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer handshaking.Close()
	handshaking.Write(Preface[:])
	time.Sleep(100 * time.Millisecond)

	start := time.Now()
	if err := l.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case err := <-accepted:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("AcceptNegotiation after Close: %v", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Close did not unblock AcceptNegotiation")
	}
	if d := time.Since(start); d > time.Second {
		t.Fatalf("Close took %v", d)
	}
	for _, c := range []net.Conn{sniffing, handshaking} {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := c.Read(make([]byte, 64))
		if err == nil || isTimeout(err) {
			t.Fatalf("pending conn not closed: %v", err)
		}
	}
	if _, err := l.AcceptNegotiation(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("AcceptNegotiation after Close: %v", err)
	}
	if err := l.Close(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		t.Fatal("inner listener still accepting")
	}
}

func TestListenerCloseClosesBacklog(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := NewListener(inner, ListenerConfig{Backlog: 2})
	var clients []net.Conn
	for i := 0; i < 4; i++ { // 2 in the backlog, 2 blocked delivering
		c, err := net.Dial("tcp", inner.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.Write([]byte("hello"))
		clients = append(clients, c)
	}
	time.Sleep(200 * time.Millisecond)
	l.Close()
	for i, c := range clients {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		if _, err := c.Read(make([]byte, 1)); err == nil || isTimeout(err) {
			t.Fatalf("client %d not closed by Close: %v", i, err)
		}
	}
}

// failingListener fails Accept with a fixed error.
type failingListener struct {
	net.Listener
	err   error
	calls int
	mu    sync.Mutex
}

func (f *failingListener) Accept() (net.Conn, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	return nil, f.err
}

type tempErr struct{}

func (tempErr) Error() string   { return "too many open files" }
func (tempErr) Temporary() bool { return true }
func (tempErr) Timeout() bool   { return false }

func TestListenerInnerErrors(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	permanent := errors.New("listener broke")
	l := NewListener(&failingListener{Listener: inner, err: permanent}, ListenerConfig{})
	if _, err := l.AcceptNegotiation(); !errors.Is(err, permanent) {
		t.Fatalf("got %v, want the inner error", err)
	}
	l.Close()

	inner, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	fl := &failingListener{Listener: inner, err: tempErr{}}
	l = NewListener(fl, ListenerConfig{})
	time.Sleep(100 * time.Millisecond)
	fl.mu.Lock()
	calls := fl.calls
	fl.mu.Unlock()
	if calls < 2 || calls > 20 {
		t.Fatalf("%d Accept calls in 100ms: retries should back off but continue", calls)
	}
	done := make(chan error)
	go func() { _, err := l.AcceptNegotiation(); done <- err }()
	l.Close()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("got %v", err)
	}
}

func TestListenerPlainCloseWrite(t *testing.T) {
	tl := newTestListener(t, ListenerConfig{})
	c := dial(t, tl)
	c.Write([]byte("QUIT"))
	r := tl.next(t, 2*time.Second)
	cw, ok := r.a.Conn.(interface{ CloseWrite() error })
	if !ok {
		t.Fatalf("%T has no CloseWrite", r.a.Conn)
	}
	r.a.Conn.Write([]byte("goodbye"))
	if err := cw.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(c)
	if err != nil || string(got) != "goodbye" {
		t.Fatalf("client read %q, %v; want goodbye then EOF", got, err)
	}
}
