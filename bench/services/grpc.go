package services

import (
	"context"
	"errors"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
)

// GRPC is grpc-go's own benchmark service (grpc.testing.BenchmarkService,
// the one grpc-go's benchmarks run), unary calls with protobuf messages
// on one grpc.ClientConn shared by every caller.
type GRPC struct{}

// Name is "grpc".
func (GRPC) Name() string { return "grpc" }

// Describe says what a call is.
func (GRPC) Describe() string { return "gRPC BenchmarkService.UnaryCall, one ClientConn" }

// benchServer echoes the request's payload, as grpc-go's benchmark server
// does.
type benchServer struct {
	testgrpc.UnimplementedBenchmarkServiceServer
}

func (benchServer) UnaryCall(_ context.Context, in *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{Payload: &testgrpc.Payload{Body: in.GetPayload().GetBody()}}, nil
}

// Serve runs a grpc.Server on ln.
func (GRPC) Serve(ln net.Listener) (func() error, error) {
	s := grpc.NewServer()
	testgrpc.RegisterBenchmarkServiceServer(s, benchServer{})
	done := make(chan error, 1)
	go func() { done <- s.Serve(ln) }()
	return func() error {
		s.Stop()
		err := <-done
		if errors.Is(err, grpc.ErrServerStopped) {
			err = nil
		}
		return err
	}, nil
}

type grpcClient struct {
	cc      *grpc.ClientConn
	client  testgrpc.BenchmarkServiceClient
	scratch []scratch
}

// NewClient makes one grpc.ClientConn whose connection cfg.Dial opens.
func (GRPC) NewClient(cfg ClientConfig) (Client, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	cc, err := grpc.NewClient("passthrough:///"+cfg.Addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithContextDialer(cfg.Dial))
	if err != nil {
		return nil, err
	}
	return &grpcClient{cc: cc, client: testgrpc.NewBenchmarkServiceClient(cc), scratch: newScratch(cfg)}, nil
}

func (c *grpcClient) Call(ctx context.Context, caller int, seq uint64) error {
	s := &c.scratch[caller]
	fillPayload(s.req, caller, seq)
	resp, err := c.client.UnaryCall(ctx, &testgrpc.SimpleRequest{
		ResponseSize: int32(len(s.req)),
		Payload:      &testgrpc.Payload{Body: s.req},
	})
	if err != nil {
		return err
	}
	return checkPayload(resp.GetPayload().GetBody(), s.want, caller, seq)
}

func (c *grpcClient) Close() error { return c.cc.Close() }
