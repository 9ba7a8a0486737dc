package services

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidwall/redcon"
	"google.golang.org/grpc"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// The servers below answer with one byte changed: a client must see it.

type flipServer struct {
	testgrpc.UnimplementedBenchmarkServiceServer
}

func (flipServer) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	body := bytes.Clone(in.GetPayload().GetBody())
	body[len(body)-1] ^= 1
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: body}}, nil
}

func tcpListener(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	return ln
}

// callFlipped makes calls 0 and 1 of caller 0 against a server that
// corrupts replies, and wants a "wrong reply" error.
func callFlipped(t *testing.T, svc Service, addr string) {
	t.Helper()
	var d net.Dialer
	c, err := svc.NewClient(ClientConfig{Addr: addr, Callers: 1, Size: 64,
		Dial: func(ctx context.Context, a string) (net.Conn, error) { return d.DialContext(ctx, "tcp", a) }})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = c.Call(ctx, 0, 0)
	if err == nil {
		err = c.Call(ctx, 0, 1)
	}
	if err == nil || !strings.Contains(err.Error(), "wrong reply to caller 0's call 0: byte 63") {
		t.Fatalf("%s: a corrupted reply gave %v", svc.Name(), err)
	}
	t.Logf("%s: %v", svc.Name(), err)
}

func TestGRPCWrongReply(t *testing.T) {
	ln := tcpListener(t)
	s := grpc.NewServer()
	testgrpc.RegisterBenchmarkServiceServer(s, flipServer{})
	go s.Serve(ln)
	defer s.Stop()
	callFlipped(t, GRPC{}, ln.Addr().String())
}

func TestHTTPWrongReply(t *testing.T) {
	ln := tcpListener(t)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		b[len(b)-1] ^= 1
		w.Write(b)
	})}
	go srv.Serve(ln)
	defer srv.Close()
	callFlipped(t, HTTP{}, ln.Addr().String())
}

func TestRedisWrongReply(t *testing.T) {
	ln := tcpListener(t)
	st := &store{kv: map[string][]byte{}}
	done := make(chan struct{})
	go func() {
		defer close(done)
		redcon.Serve(ln, func(conn redcon.Conn, cmd redcon.Command) {
			if strings.EqualFold(string(cmd.Args[0]), "SET") && len(cmd.Args) == 3 {
				v := cmd.Args[2]
				v[len(v)-1] ^= 1
			}
			st.handle(conn, cmd)
		}, nil, nil)
	}()
	defer func() { ln.Close(); <-done }()
	callFlipped(t, Redis{}, ln.Addr().String())
}

// fakeClient fails its call number failAt (of any caller), or blocks in
// it until its context ends if block is set.
type fakeClient struct {
	calls   atomic.Int64
	failAt  int64
	block   bool
	blocked atomic.Bool
}

func (f *fakeClient) Call(ctx context.Context, caller int, seq uint64) error {
	if n := f.calls.Add(1); n == f.failAt {
		if f.block {
			f.blocked.Store(true)
			<-ctx.Done()
			return ctx.Err()
		}
		return errors.New("boom")
	}
	time.Sleep(100 * time.Microsecond)
	return nil
}

func (f *fakeClient) Close() error { return nil }

func TestRunLoadFailures(t *testing.T) {
	// A call that fails fails the run, with its error.
	r, err := RunLoad(context.Background(), &fakeClient{failAt: 50}, Load{Callers: 2, Duration: 100 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "boom") || r.Errors != 1 {
		t.Errorf("failed call: %+v, %v", r, err)
	}
	// A call that never returns fails the run after Stuck, in the window
	// and in the warm-up.
	for _, failAt := range []int64{1, 50} {
		f := &fakeClient{failAt: failAt, block: true}
		start := time.Now()
		r, err = RunLoad(context.Background(), f, Load{Callers: 2, Duration: 100 * time.Millisecond, Stuck: 200 * time.Millisecond})
		if err == nil || !strings.Contains(err.Error(), "no reply 200ms after") || !f.blocked.Load() || time.Since(start) > 5*time.Second {
			t.Errorf("stuck call %d: %+v, %v after %v", failAt, r, err, time.Since(start))
		}
		t.Logf("stuck call %d: %v", failAt, err)
	}
	// A run that works counts its calls and orders its percentiles.
	marks := []bool{}
	r, err = RunLoad(context.Background(), &fakeClient{}, Load{Callers: 3, Warmup: 20 * time.Millisecond, Duration: 100 * time.Millisecond,
		Mark: func(start bool) { marks = append(marks, start) }})
	if err != nil || r.Requests < 100 || r.P50 < 100*time.Microsecond || r.P50 > r.P99 || r.Seconds != 0.1 ||
		len(marks) != 2 || !marks[0] || marks[1] {
		t.Errorf("good run: %+v, %v, marks %v", r, err, marks)
	}
	if _, err := RunLoad(context.Background(), &fakeClient{}, Load{Callers: 0, Duration: time.Second}); err == nil {
		t.Error("0 callers accepted")
	}
}

func TestPercentile(t *testing.T) {
	var d []time.Duration
	for i := 1; i <= 1000; i++ {
		d = append(d, time.Duration(i))
	}
	if p50, p99, p999 := percentile(d, 0.5), percentile(d, 0.99), percentile(d, 0.999); p50 != 500 || p99 != 990 || p999 != 999 {
		t.Errorf("p50 %v p99 %v p999 %v", p50, p99, p999)
	}
	if p := percentile(d[:1], 0.99); p != 1 {
		t.Errorf("one sample: %v", p)
	}
}

func TestPayload(t *testing.T) {
	b, want := make([]byte, 100), make([]byte, 100)
	fillPayload(b, 7, 9)
	if err := checkPayload(b, want, 7, 9); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		caller int
		seq    uint64
	}{{7, 10}, {8, 9}} {
		if err := checkPayload(b, want, c.caller, c.seq); err == nil {
			t.Errorf("payload of 7/9 accepted as %d/%d", c.caller, c.seq)
		}
	}
	if err := checkPayload(b[:99], want, 7, 9); err == nil {
		t.Error("short reply accepted")
	}
}
