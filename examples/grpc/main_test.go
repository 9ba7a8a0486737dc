package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rsock-go/rsock/netconn"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// netconn keeps the soft-RoCE device open for 5 s after its last
		// connection closes: its receive loop and fine clock, and the timer's function
		// should it fire while goleak looks.
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
		// The same for the shm channel between the two ends: its watcher
		// and the timer that closes it.
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/shm.(*Device).watch"),
		goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.(*shmChannel).release.func1"),
	)
}

type fixture struct {
	addr     string
	ln       *trackingListener
	chatDone chan error
	// conns are the client's connections, from client.
	mu    sync.Mutex
	conns []*netconn.Conn
}

// start serves the Echo service on a netconn listener on loopback.
func start(t *testing.T) *fixture {
	t.Helper()
	ln, err := netconn.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &fixture{addr: ln.Addr().String(), ln: track(ln), chatDone: make(chan error, 16)}
	srv, impl := newServer(f.ln)
	impl.chatDone = f.chatDone
	done := make(chan error, 1)
	go func() { done <- srv.Serve(f.ln) }()
	t.Cleanup(func() {
		srv.Stop()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return f
}

// client returns an Echo client that dials with netconn and records its
// connections.
func (f *fixture) client(t *testing.T) *EchoClient {
	t.Helper()
	cc, err := dial(f.addr, func(c *netconn.Conn) {
		f.mu.Lock()
		f.conns = append(f.conns, c)
		f.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return NewEchoClient(cc)
}

// checkRDMA asserts that every connection, on both sides, is on RDMA.
func (f *fixture) checkRDMA(t *testing.T) {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.conns) == 0 {
		t.Error("the client dialed no connection")
	}
	for _, c := range f.conns {
		if !strings.HasPrefix(c.Transport(), "rdma") {
			t.Errorf("client conn %v: transport %q (%s), want rdma", c.LocalAddr(), c.Transport(), c.FallbackReason())
		}
	}
	for _, tr := range f.ln.transports() {
		if !strings.HasPrefix(tr, "rdma") {
			t.Errorf("server conn: transport %q, want rdma", tr)
		}
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func TestUnaryOverRDMA(t *testing.T) {
	f := start(t)
	client := f.client(t)
	var p peer.Peer
	reply, err := client.Echo(ctxTimeout(t, 10*time.Second), &EchoRequest{Message: "ping"}, grpc.Peer(&p))
	if err != nil {
		t.Fatal(err)
	}
	if reply.Message != "ping" {
		t.Errorf("reply %q, want ping", reply.Message)
	}
	// The server found its conn by the peer address gRPC gave the handler:
	// gRPC sees the netconn conn's TCP address.
	if !strings.HasPrefix(reply.Transport, "rdma") {
		t.Errorf("server transport %q, want rdma", reply.Transport)
	}
	if p.Addr == nil || p.Addr.String() != f.addr {
		t.Errorf("client's peer address %v, want the listener's TCP address %s", p.Addr, f.addr)
	}
	if _, ok := p.Addr.(*net.TCPAddr); !ok {
		t.Errorf("peer address is a %T, want *net.TCPAddr", p.Addr)
	}
	f.checkRDMA(t)
}

func TestBidiStreaming(t *testing.T) {
	f := start(t)
	client := f.client(t)
	stream, err := client.Chat(ctxTimeout(t, 10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	// Lock step, then many messages in flight at once.
	for i := range 5 {
		if err := stream.Send(&ChatMessage{Seq: i, Text: "hi"}); err != nil {
			t.Fatal(err)
		}
		in, err := stream.Recv()
		if err != nil {
			t.Fatal(err)
		}
		if in.Seq != i || !strings.HasPrefix(in.Text, "rdma") || !strings.HasSuffix(in.Text, ": hi") {
			t.Errorf("message %d: got %+v", i, in)
		}
	}
	const n = 200
	sendErr := make(chan error, 1)
	go func() {
		for i := range n {
			if err := stream.Send(&ChatMessage{Text: string(rune('a' + i%26))}); err != nil {
				sendErr <- err
				return
			}
		}
		sendErr <- stream.CloseSend()
	}()
	for i := range n {
		in, err := stream.Recv()
		if err != nil {
			t.Fatalf("receive %d: %v", i, err)
		}
		if in.Seq != 5+i || !strings.HasSuffix(in.Text, ": "+string(rune('a'+i%26))) {
			t.Fatalf("receive %d: got %+v", i, in)
		}
	}
	if err := <-sendErr; err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		t.Errorf("after CloseSend: %v, want EOF", err)
	}
	if err := <-f.chatDone; err != nil {
		t.Errorf("server's Chat ended with %v", err)
	}
	f.checkRDMA(t)
}

func randomBytes(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		for j := 0; j < 8 && i+j < n; j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

func TestLargeMessages(t *testing.T) {
	const size = 4 << 20
	f := start(t)
	client := f.client(t)
	ctx := ctxTimeout(t, 15*time.Second)

	t.Run("unary", func(t *testing.T) {
		payload := randomBytes(size, 1)
		reply, err := client.Echo(ctx, &EchoRequest{Message: "big", Payload: payload})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(reply.Payload, payload) {
			t.Fatalf("echoed payload differs: %d bytes, want %d", len(reply.Payload), size)
		}
	})

	t.Run("stream", func(t *testing.T) {
		stream, err := client.Chat(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 2 {
			payload := randomBytes(size, uint64(10+i))
			if err := stream.Send(&ChatMessage{Text: "big", Payload: payload}); err != nil {
				t.Fatal(err)
			}
			in, err := stream.Recv()
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(in.Payload, payload) {
				t.Fatalf("message %d: payload differs: %d bytes, want %d", i, len(in.Payload), size)
			}
		}
		stream.CloseSend()
		if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
			t.Errorf("after CloseSend: %v, want EOF", err)
		}
	})

	t.Run("too large", func(t *testing.T) {
		_, err := client.Echo(ctx, &EchoRequest{Payload: make([]byte, MaxMessageSize+1)})
		if status.Code(err) != codes.ResourceExhausted {
			t.Errorf("message above the limit: %v, want ResourceExhausted", err)
		}
	})
	f.checkRDMA(t)
}

func TestDeadline(t *testing.T) {
	f := start(t)
	client := f.client(t)
	// Connect first, so the deadline is spent in the handler.
	if _, err := client.Echo(ctxTimeout(t, 10*time.Second), &EchoRequest{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	begin := time.Now()
	_, err := client.Echo(ctx, &EchoRequest{Message: "slow", Delay: 10 * time.Second})
	if status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(begin); d > 3*time.Second {
		t.Errorf("the call took %v past a 200ms deadline", d)
	}
	// The connection is still good.
	if _, err := client.Echo(ctxTimeout(t, 10*time.Second), &EchoRequest{Message: "after"}); err != nil {
		t.Errorf("call after the deadline: %v", err)
	}
	f.checkRDMA(t)
}

func TestCancel(t *testing.T) {
	f := start(t)
	client := f.client(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := client.Chat(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Send(&ChatMessage{Text: "one"}); err != nil {
		t.Fatal(err)
	}
	if _, err := stream.Recv(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := stream.Recv(); status.Code(err) != codes.Canceled {
		t.Errorf("Recv after cancel: %v, want Canceled", err)
	}
	select {
	case err := <-f.chatDone:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("server's Chat ended with %v, want its context cancelled", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the server's Chat did not end after the client cancelled")
	}
	// The connection is still good.
	if _, err := client.Echo(ctxTimeout(t, 10*time.Second), &EchoRequest{Message: "after"}); err != nil {
		t.Errorf("call after cancel: %v", err)
	}
	f.checkRDMA(t)
}

// TestPlainClient shows that a gRPC client with the default dialer, which
// knows nothing of rsock, is served by the same listener over TCP.
func TestPlainClient(t *testing.T) {
	f := start(t)
	cc, err := grpc.NewClient("passthrough:///"+f.addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(gobCodec{})))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	reply, err := NewEchoClient(cc).Echo(ctxTimeout(t, 10*time.Second), &EchoRequest{Message: "plain"})
	if err != nil {
		t.Fatal(err)
	}
	if reply.Message != "plain" || reply.Transport != "tcp" {
		t.Errorf("reply %+v, want message plain over tcp", reply)
	}
}

func TestRun(t *testing.T) {
	var out, errb bytes.Buffer
	if err := run([]string{"-msg", "demo", "-chat", "2"}, &out, &errb); err != nil {
		t.Fatalf("run: %v\n%s", err, errb.String())
	}
	tr := loopbackTransport()
	want := fmt.Sprintf("Echo: \"demo\"; client transport %s, server transport %s\nChat 0: %s: demo #0\nChat 1: %s: demo #1\n", tr, tr, tr, tr)
	if out.String() != want {
		t.Errorf("stdout:\n%s\nwant:\n%s", out.String(), want)
	}

	f := start(t)
	out.Reset()
	if err := run([]string{"-addr", f.addr, "-chat", "0"}, &out, &errb); err != nil {
		t.Fatalf("run -addr: %v\n%s", err, errb.String())
	}
	if !strings.HasPrefix(out.String(), `Echo: "hello"; client transport `+tr+`, server transport rdma`) {
		t.Errorf("-addr stdout %q", out.String())
	}

	for _, args := range [][]string{{"-listen", "x", "-addr", "y"}, {"extra"}, {"-chat", "-1"}, {"-bogus"}} {
		if err := run(args, io.Discard, io.Discard); err == nil {
			t.Errorf("run %q: no error", args)
		}
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
