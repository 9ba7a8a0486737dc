package verbsbench

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// startServer serves one session on a loopback listener and returns its
// address and a function that waits for Serve's result.
func startServer(t *testing.T, ctx context.Context) (string, func() error) {
	t.Helper()
	return startServerWith(t, ctx, ServerConfig{Timeout: 5 * time.Second})
}

// startServerWith is startServer with the server's configuration.
func startServerWith(t *testing.T, ctx context.Context, cfg ServerConfig) (string, func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		defer ln.Close()
		conn, err := ln.Accept()
		if err != nil {
			res <- err
			return
		}
		defer conn.Close()
		res <- Serve(ctx, conn, cfg)
	}()
	var got *error
	wait := func() error {
		if got == nil {
			err := <-res
			got = &err
		}
		return *got
	}
	t.Cleanup(func() { ln.Close(); wait() })
	return ln.Addr().String(), wait
}

func dial(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// TestAllTests runs every test in one session and checks the numbers.
func TestAllTests(t *testing.T) {
	ctx := context.Background()
	addr, wait := startServer(t, ctx)
	conn := dial(t, addr)
	cases := []Config{
		{Test: TestWriteBW, Size: 8192, MTU: 1024, Iters: 300, TxDepth: 32},
		{Test: TestWriteBW, Size: 100, MTU: 256, Iters: 37, TxDepth: 8, CQMod: 5},
		{Test: TestSendBW, Size: 4096, MTU: 4096, Iters: 300, TxDepth: 32, RxDepth: 16},
		{Test: TestReadBW, Size: 16384, MTU: 2048, Iters: 200, TxDepth: 32, Outs: 4},
		{Test: TestWriteLat, Size: 64, Iters: 300},
		{Test: TestWriteLat, Size: 1000, MTU: 512, Iters: 50},
	}
	for _, c := range cases {
		r, err := Run(ctx, conn, c)
		if err != nil {
			t.Fatalf("%v: %v", c.Test, err)
		}
		t.Logf("%s", r.Summary())
		if r.Test != c.Test.String() || r.Mode != "verbs" || r.Size != c.Size || r.Iters != c.Iters {
			t.Errorf("%v: result %+v does not match config %+v", c.Test, r, c)
		}
		if r.Bytes != uint64(c.Size)*c.Iters {
			t.Errorf("%v: bytes %d, want %d", c.Test, r.Bytes, uint64(c.Size)*c.Iters)
		}
		if r.Seconds <= 0 || r.GBps <= 0 || r.MsgRate <= 0 {
			t.Errorf("%v: rates %v s %v GB/s %v msg/s", c.Test, r.Seconds, r.GBps, r.MsgRate)
		}
		if r.CPUUser+r.CPUSys+r.ServerCPUUser+r.ServerCPUSys <= 0 {
			t.Errorf("%v: no CPU time", c.Test)
		}
		switch c.Test {
		case TestWriteLat:
			if !(r.MinUs > 0 && r.MinUs <= r.P50Us && r.P50Us <= r.P99Us && r.P99Us <= r.P999Us && r.P999Us <= r.MaxUs) {
				t.Errorf("latencies not ordered: min %v p50 %v p99 %v p999 %v max %v", r.MinUs, r.P50Us, r.P99Us, r.P999Us, r.MaxUs)
			}
			if r.ServerMsgs != c.Iters {
				t.Errorf("server answered %d, want %d", r.ServerMsgs, c.Iters)
			}
		case TestSendBW:
			if r.ServerMsgs != c.Iters || r.ServerBytes != r.Bytes {
				t.Errorf("server received %d msgs %d bytes, want %d, %d", r.ServerMsgs, r.ServerBytes, c.Iters, r.Bytes)
			}
		}
		if c.Test != TestWriteLat && r.VerifiedBytes == 0 {
			t.Errorf("%v: no data verified", c.Test)
		}
	}
	if err := Bye(conn); err != nil {
		t.Fatal(err)
	}
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestDuration runs timed tests; the count must end on a signaled request.
func TestDuration(t *testing.T) {
	ctx := context.Background()
	addr, wait := startServer(t, ctx)
	conn := dial(t, addr)
	for _, c := range []Config{
		{Test: TestWriteBW, Size: 4096, Duration: 150 * time.Millisecond, TxDepth: 16, CQMod: 4},
		{Test: TestSendBW, Size: 4096, Duration: 150 * time.Millisecond},
		{Test: TestWriteLat, Size: 8, Duration: 100 * time.Millisecond},
	} {
		r, err := Run(ctx, conn, c)
		if err != nil {
			t.Fatalf("%v: %v", c.Test, err)
		}
		if r.Iters == 0 || r.Seconds < c.Duration.Seconds() || r.Bytes != r.Iters*uint64(c.Size) {
			t.Errorf("%v: %d iterations in %v s", c.Test, r.Iters, r.Seconds)
		}
		if c.CQMod != 0 && r.Iters%uint64(c.CQMod) != 0 {
			t.Errorf("%v: %d iterations is not a multiple of cq-mod %d", c.Test, r.Iters, c.CQMod)
		}
	}
	conn.Close() // closing between tests ends the session cleanly
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestDurationEndsWhenIdle ends timed tests whose every request is
// complete when the time is up (a depth of 1 leaves the queue empty after
// each completion): the client must stop rather than wait for a
// completion that cannot come.
func TestDurationEndsWhenIdle(t *testing.T) {
	ctx := context.Background()
	addr, wait := startServer(t, ctx)
	conn := dial(t, addr)
	for _, test := range []Test{TestWriteBW, TestSendBW, TestReadBW} {
		for round := range 10 {
			c := Config{Test: test, Size: 64, Duration: time.Duration(round+1) * time.Millisecond,
				TxDepth: 1, CQMod: 1, Timeout: 5 * time.Second}
			r, err := Run(ctx, conn, c)
			if err != nil {
				t.Fatalf("%v, %v: %v", test, c.Duration, err)
			}
			if r.Iters == 0 || r.Bytes != r.Iters*uint64(c.Size) {
				t.Fatalf("%v: %d iterations, %d bytes", test, r.Iters, r.Bytes)
			}
		}
	}
	conn.Close()
	if err := wait(); err != nil {
		t.Fatalf("Serve: %v", err)
	}
}

// TestServerGoesAway cancels the server in the middle of a test; the
// client must fail promptly with a peer error.
func TestServerGoesAway(t *testing.T) {
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, wait := startServer(t, sctx)
	conn := dial(t, addr)
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	_, err := Run(context.Background(), conn, Config{Test: TestWriteLat, Size: 64, Duration: time.Minute})
	if !errors.Is(err, ErrPeer) {
		t.Fatalf("Run: %v, want a peer error", err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v to notice", d)
	}
	t.Logf("client: %v", err)
	if err := wait(); err == nil {
		t.Error("Serve returned nil after cancellation")
	}
}

// TestClientGoesAway cancels the client mid-test; the server must end the
// session with an error.
func TestClientGoesAway(t *testing.T) {
	addr, wait := startServer(t, context.Background())
	conn := dial(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := Run(ctx, conn, Config{Test: TestSendBW, Size: 4096, Duration: time.Minute})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Run: %v, want deadline exceeded", err)
	}
	conn.Close()
	err = wait()
	if !errors.Is(err, ErrPeer) {
		t.Fatalf("Serve: %v, want a peer error", err)
	}
	t.Logf("server: %v", err)
}

// TestBadHello sends an invalid Hello; the server must answer with an
// Error frame and end the session.
func TestBadHello(t *testing.T) {
	addr, wait := startServer(t, context.Background())
	conn := dial(t, addr)
	p := validParams()
	p.MTU = 1500
	if err := WriteFrame(conn, FrameHello, p.Encode()); err != nil {
		t.Fatal(err)
	}
	typ, payload, err := ReadFrame(conn)
	if err != nil || typ != FrameError {
		t.Fatalf("got %v %q %v, want an Error frame", typ, payload, err)
	}
	t.Logf("server said: %s", payload)
	if err := wait(); !errors.Is(err, ErrProtocol) {
		t.Fatalf("Serve: %v, want a protocol error", err)
	}
}

func TestConfigCheck(t *testing.T) {
	bad := []Config{
		{Test: TestWriteBW, Size: -1},
		{Test: TestWriteBW, MTU: 1500},
		{Test: TestWriteBW, Iters: 10, Duration: time.Second},
		{Test: TestWriteBW, TxDepth: MaxDepth + 1},
		{Test: TestWriteBW, TxDepth: 8, CQMod: 9},
		{Test: TestReadBW, Outs: 200},
		{Test: 9},
	}
	for _, c := range bad {
		if err := c.Check(); err == nil {
			t.Errorf("Check(%+v) = nil", c)
		}
	}
	if err := (Config{Test: TestWriteLat}).Check(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}

func TestLatencies(t *testing.T) {
	rtts := make([]time.Duration, 1000)
	for i := range rtts {
		rtts[i] = time.Duration(1000-i) * 2 * time.Microsecond
	}
	l := Latencies(rtts)
	if l.Min != 1 || l.Max != 1000 || l.P50 != 500 || l.P99 != 990 || l.P999 != 999 || l.Avg != 500.5 {
		t.Errorf("got %+v", l)
	}
}

func TestParseTest(t *testing.T) {
	for _, tt := range Tests {
		got, err := ParseTest(tt.String())
		if err != nil || got != tt {
			t.Errorf("ParseTest(%q) = %v, %v", tt.String(), got, err)
		}
	}
	if _, err := ParseTest("atomic_bw"); err == nil {
		t.Error("ParseTest accepted atomic_bw")
	}
}
