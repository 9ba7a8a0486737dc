// Package services measures real Go services over a net.Listener and a
// dial function: gRPC unary calls on one grpc.ClientConn (grpc-go's own
// benchmark service, BenchmarkService.UnaryCall, with protobuf messages),
// a Redis-protocol server (tidwall/redcon) driven by a standard Go Redis
// client (redis/go-redis with a custom Dialer and a pool sized for the
// callers), and net/http (an http.Server on the listener, an
// http.Transport with DialContext and keep-alives).
//
// It knows nothing of how a transport works: a Transport listens and
// dials (plain TCP, the kernel's Unix sockets, or rsock's netconn with
// the library's defaults or a chosen provider and link), and every
// connection is tallied by what it reports it ran on (Transport and
// FallbackReason, when the conn has them). rsockbench's services
// subcommand runs the server side in one process and the load in
// another.
//
// Every call checks its reply: the gRPC and HTTP servers echo the
// request's payload, and the Redis load alternates SET and GET of a key
// per caller, each payload stamped with the caller and a sequence number,
// so a reply to another request or a corrupted one is an error.
package services
