// Command grpc shows a gRPC service running over rsock.
//
// The server is an ordinary grpc.Server serving a listener from
// netconn.Listen; the client is an ordinary grpc.ClientConn whose dialer
// is netconn's:
//
//	ln, _ := netconn.Listen("tcp", ":50051")
//	s := grpc.NewServer()
//	RegisterEchoServer(s, impl)
//	s.Serve(ln)
//
//	cc, _ := grpc.NewClient("passthrough:///"+addr,
//		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
//			return (&netconn.Dialer{}).DialContext(ctx, "tcp", addr)
//		}),
//		grpc.WithTransportCredentials(insecure.NewCredentials()))
//
// gRPC's HTTP/2 frames then travel over RDMA (here soft-RoCE on UDP);
// deadlines, cancellation, flow control and large messages behave as over
// TCP. A client that dials plainly, such as grpcurl or a gRPC client in
// another language, reaches the same listener over plain TCP.
//
// To need no protoc, the service is defined by hand in echo.go: Go structs
// for messages, a gob codec registered with gRPC, and a grpc.ServiceDesc
// with a unary method, Echo, and a bidirectional-streaming one, Chat.
//
// Usage:
//
//	go run ./examples/grpc                         # serve on loopback, call once, exit
//	go run ./examples/grpc -listen 127.0.0.1:50051 # serve until interrupted
//	go run ./examples/grpc -addr 127.0.0.1:50051 -msg hi -chat 3
//
// The client prints each reply with the transport of both sides of its
// connection.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/rsock-go/rsock/netconn"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "grpc:", err)
		os.Exit(1)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("grpc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "serve on this address until interrupted (e.g. 127.0.0.1:50051)")
	addr := fs.String("addr", "", "call the server at this address and exit")
	msg := fs.String("msg", "hello", "the message to send")
	chat := fs.Int("chat", 3, "how many messages to exchange on the Chat stream")
	timeout := fs.Duration("timeout", 10*time.Second, "deadline of the calls")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *listen != "" && *addr != "" {
		return errors.New("give -listen or -addr, not both")
	}
	if *chat < 0 {
		return errors.New("-chat must not be negative")
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	if *addr != "" {
		cctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		return call(cctx, *addr, *msg, *chat, stdout)
	}

	listenAddr := *listen
	if listenAddr == "" {
		listenAddr = "127.0.0.1:0"
	}
	ln, err := netconn.Listen("tcp", listenAddr)
	if err != nil {
		return err
	}
	tl := track(ln)
	srv, _ := newServer(tl)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(tl) }()

	if *listen != "" {
		fmt.Fprintf(stderr, "serving gRPC on %s (rsock and plain TCP clients); ^C to stop\n", ln.Addr())
		select {
		case err := <-done:
			return err
		case <-ctx.Done():
		}
		srv.GracefulStop()
		return <-done
	}

	// No -listen or -addr: a self-contained demo on loopback.
	cctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	err = call(cctx, ln.Addr().String(), *msg, *chat, stdout)
	srv.Stop()
	if serr := <-done; err == nil && serr != nil && !errors.Is(serr, grpc.ErrServerStopped) {
		err = serr
	}
	return err
}

// call makes one Echo call and one Chat of n messages to addr.
func call(ctx context.Context, addr, msg string, n int, out io.Writer) error {
	var mu sync.Mutex
	var conns []*netconn.Conn
	cc, err := dial(addr, func(c *netconn.Conn) {
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
	})
	if err != nil {
		return err
	}
	defer cc.Close()
	client := NewEchoClient(cc)

	reply, err := client.Echo(ctx, &EchoRequest{Message: msg})
	if err != nil {
		return fmt.Errorf("Echo: %w", err)
	}
	mu.Lock()
	var local []string
	for _, c := range conns {
		s := c.Transport()
		if r := c.FallbackReason(); r != "" {
			s += " (" + r + ")"
		}
		local = append(local, s)
	}
	mu.Unlock()
	fmt.Fprintf(out, "Echo: %q; client transport %s, server transport %s\n",
		reply.Message, strings.Join(local, ", "), reply.Transport)

	if n == 0 {
		return nil
	}
	stream, err := client.Chat(ctx)
	if err != nil {
		return fmt.Errorf("Chat: %w", err)
	}
	for i := range n {
		if err := stream.Send(&ChatMessage{Seq: i, Text: fmt.Sprintf("%s #%d", msg, i)}); err != nil {
			return fmt.Errorf("Chat send: %w", err)
		}
		in, err := stream.Recv()
		if err != nil {
			return fmt.Errorf("Chat receive: %w", err)
		}
		fmt.Fprintf(out, "Chat %d: %s\n", in.Seq, in.Text)
	}
	if err := stream.CloseSend(); err != nil {
		return err
	}
	if _, err := stream.Recv(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("Chat end: %v, want EOF", err)
	}
	return nil
}
