package main

import (
	"bytes"
	"context"
	"encoding/gob"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/rsock-go/rsock/netconn"
)

// This file defines the Echo service by hand, the way protoc-gen-go-grpc
// would from a .proto file, so that the example needs no code generator:
// the messages are Go structs carried by a gob codec, and the service is a
// grpc.ServiceDesc.

// MaxMessageSize is the largest message either side sends or accepts. gRPC
// accepts 4 MiB by default; the example moves 4 MiB payloads plus framing.
const MaxMessageSize = 16 << 20

// EchoRequest asks for Message and Payload back.
type EchoRequest struct {
	Message string
	Payload []byte
	// Delay makes the server wait this long before it answers, to show
	// deadlines; it gives up when the call's context ends.
	Delay time.Duration
}

// EchoReply carries the request's Message and Payload back, and the
// transport of the server's side of the connection.
type EchoReply struct {
	Message   string
	Payload   []byte
	Transport string
}

// ChatMessage is a message in either direction of a Chat.
type ChatMessage struct {
	Seq     int
	Text    string
	Payload []byte
}

// gobCodec is a gRPC codec that encodes each message as a gob stream.
type gobCodec struct{}

// codecName names the codec on the wire: the content type is
// application/grpc+gob.
const codecName = "gob"

func (gobCodec) Name() string { return codecName }

func (gobCodec) Marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	if err := gob.NewEncoder(&b).Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func (gobCodec) Unmarshal(data []byte, v any) error {
	return gob.NewDecoder(bytes.NewReader(data)).Decode(v)
}

func init() {
	// The server finds the codec by the content-subtype the client sends.
	encoding.RegisterCodec(gobCodec{})
}

// EchoServer is the service's server API.
type EchoServer interface {
	Echo(context.Context, *EchoRequest) (*EchoReply, error)
	Chat(grpc.BidiStreamingServer[ChatMessage, ChatMessage]) error
}

const serviceName = "rsock.examples.Echo"

// echoServiceDesc describes the service to grpc.Server.RegisterService.
var echoServiceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*EchoServer)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Echo",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			req := new(EchoRequest)
			if err := dec(req); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, req any) (any, error) {
				return srv.(EchoServer).Echo(ctx, req.(*EchoRequest))
			}
			if interceptor == nil {
				return call(ctx, req)
			}
			return interceptor(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/Echo"}, call)
		},
	}},
	Streams: []grpc.StreamDesc{{
		StreamName: "Chat",
		Handler: func(srv any, stream grpc.ServerStream) error {
			return srv.(EchoServer).Chat(&grpc.GenericServerStream[ChatMessage, ChatMessage]{ServerStream: stream})
		},
		ServerStreams: true,
		ClientStreams: true,
	}},
}

// RegisterEchoServer registers srv with s.
func RegisterEchoServer(s grpc.ServiceRegistrar, srv EchoServer) {
	s.RegisterService(&echoServiceDesc, srv)
}

// EchoClient is the service's client API.
type EchoClient struct{ cc grpc.ClientConnInterface }

// NewEchoClient returns a client that calls through cc.
func NewEchoClient(cc grpc.ClientConnInterface) *EchoClient { return &EchoClient{cc} }

// Echo is the unary call.
func (c *EchoClient) Echo(ctx context.Context, req *EchoRequest, opts ...grpc.CallOption) (*EchoReply, error) {
	reply := new(EchoReply)
	if err := c.cc.Invoke(ctx, "/"+serviceName+"/Echo", req, reply, opts...); err != nil {
		return nil, err
	}
	return reply, nil
}

// Chat opens the bidirectional stream.
func (c *EchoClient) Chat(ctx context.Context, opts ...grpc.CallOption) (grpc.BidiStreamingClient[ChatMessage, ChatMessage], error) {
	s, err := c.cc.NewStream(ctx, &echoServiceDesc.Streams[0], "/"+serviceName+"/Chat", opts...)
	if err != nil {
		return nil, err
	}
	return &grpc.GenericClientStream[ChatMessage, ChatMessage]{ClientStream: s}, nil
}

// server implements EchoServer.
type server struct {
	// conns tells the transport of a client's connection.
	conns *trackingListener
	// chatDone, if not nil, receives how each Chat ended: nil when the
	// client closed its side, else the error, wrapping the stream
	// context's error when the call was cancelled or timed out.
	chatDone chan<- error
}

func (s *server) transportOf(ctx context.Context) string {
	if p, ok := peer.FromContext(ctx); ok && s.conns != nil {
		return s.conns.transportOf(p.Addr)
	}
	return "unknown"
}

func (s *server) Echo(ctx context.Context, req *EchoRequest) (*EchoReply, error) {
	if req.Delay > 0 {
		t := time.NewTimer(req.Delay)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	return &EchoReply{Message: req.Message, Payload: req.Payload, Transport: s.transportOf(ctx)}, nil
}

// Chat answers every message with one of its own: the same payload, and
// the text prefixed with the server's transport.
func (s *server) Chat(stream grpc.BidiStreamingServer[ChatMessage, ChatMessage]) (err error) {
	ctx := stream.Context()
	if s.chatDone != nil {
		defer func() {
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (stream: %v)", ctx.Err(), err)
			}
			s.chatDone <- err
		}()
	}
	tr := s.transportOf(ctx)
	for seq := 0; ; seq++ {
		in, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		out := &ChatMessage{Seq: seq, Text: tr + ": " + in.Text, Payload: in.Payload}
		if err := stream.Send(out); err != nil {
			return err
		}
	}
}

// trackingListener is a netconn listener that remembers the transport of
// each connection it accepted, by the client's address, until it closes.
// gRPC tells a handler the client's address (peer.FromContext) but not
// its connection.
type trackingListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[string]*netconn.Conn
}

func track(ln net.Listener) *trackingListener {
	return &trackingListener{Listener: ln, conns: make(map[string]*netconn.Conn)}
}

func (l *trackingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	nc := c.(*netconn.Conn)
	key := c.RemoteAddr().String()
	l.mu.Lock()
	l.conns[key] = nc
	l.mu.Unlock()
	return &trackedConn{Conn: nc, forget: func() {
		l.mu.Lock()
		if l.conns[key] == nc {
			delete(l.conns, key)
		}
		l.mu.Unlock()
	}}, nil
}

// transportOf names the transport of the accepted connection from addr.
func (l *trackingListener) transportOf(addr net.Addr) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c := l.conns[addr.String()]; c != nil {
		return c.Transport()
	}
	return "unknown"
}

// transports lists the transports of the open accepted connections.
func (l *trackingListener) transports() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var ts []string
	for _, c := range l.conns {
		ts = append(ts, c.Transport())
	}
	return ts
}

type trackedConn struct {
	*netconn.Conn
	once   sync.Once
	forget func()
}

func (c *trackedConn) Close() error {
	c.once.Do(c.forget)
	return c.Conn.Close()
}

// newServer returns a gRPC server with the Echo service, and the service.
func newServer(conns *trackingListener) (*grpc.Server, *server) {
	s := grpc.NewServer(grpc.MaxRecvMsgSize(MaxMessageSize), grpc.MaxSendMsgSize(MaxMessageSize))
	impl := &server{conns: conns}
	RegisterEchoServer(s, impl)
	return s, impl
}

// dial returns a client connection to addr that dials with netconn. If
// onDial is not nil it is called with every connection gRPC makes.
func dial(addr string, onDial func(*netconn.Conn)) (*grpc.ClientConn, error) {
	d := &netconn.Dialer{}
	return grpc.NewClient("passthrough:///"+addr,
		grpc.WithContextDialer(func(ctx context.Context, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, "tcp", addr)
			if err == nil && onDial != nil {
				onDial(c.(*netconn.Conn))
			}
			return c, err
		}),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(
			grpc.ForceCodec(gobCodec{}),
			grpc.MaxCallRecvMsgSize(MaxMessageSize),
			grpc.MaxCallSendMsgSize(MaxMessageSize),
		),
	)
}
