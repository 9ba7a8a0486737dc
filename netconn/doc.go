// Package netconn is rsock's public API: a net.Listener and net.Conn that
// carry each byte stream over an RDMA reliable-connected queue pair, and
// fall back to TCP when the peer, the path or the host cannot do RDMA.
//
// It follows package net:
//
//	ln, err := netconn.Listen("tcp", ":8080")       // a net.Listener
//	c, err := netconn.Dial("tcp", "server:8080")     // a net.Conn
//	d := netconn.Dialer{Provider: "softroce"}; d.DialContext(ctx, "tcp", addr)
//	lc := netconn.ListenConfig{}; lc.Listen(ctx, "tcp", ":8080")
//
// Every conn is a *Conn; Transport reports "rdma/<provider>/<link>" (for
// example "rdma/softroce/udp") or "tcp".
//
// How a connection is made: the dialer connects over TCP and sends a
// versioned preface and a Hello with its queue pair and receive ring
// (package fallback). The listener sniffs every accepted connection: a
// plain TCP client (curl, a plain net.Dial) is served as plain TCP with
// the sniffed bytes replayed; an rsock dialer is answered Accept, with the
// listener's parameters, or Decline. After the handshake the TCP
// connection stays open as the liveness channel: when the peer process
// dies its kernel closes the socket and the stream fails at once. Data
// goes over RDMA. A dialer that reaches a plain TCP server reconnects
// plainly and remembers that address for a while. A Decline, a provider
// that cannot start, or a failed queue pair setup leaves both sides on the
// same TCP connection.
//
// Knobs, in the config structs and the environment (the struct wins):
//
//	RSOCK_PROVIDER  auto (default) | softroce | rdmacore | tcp
//	                auto uses rdmacore when built in with a usable device,
//	                else softroce; tcp turns RDMA off.
//	RSOCK_LINK      auto (default) | udp | memif: the soft-RoCE packet link.
//	                auto uses memif (shared-memory rings) when both ends
//	                are on the same host, and udp otherwise; memif demands
//	                it and falls back to TCP without it.
//	RSOCK_RING_SIZE receive and send ring bytes per connection, a power of
//	                two from 4096 to 67108864 (default 524288).
//	RSOCK_PCAP      a file that the soft-RoCE devices write their packets
//	                to, as a pcap that tshark decodes as RoCEv2;
//	                RSOCK_PCAP_MAX bounds it (default 64 MiB).
//
// Observability: Conn.Stats describes one connection (as ss -ti would);
// Snapshot the process (devices, their counters and conns, fallbacks),
// published nowhere unless the program serves it (package netconn/metrics
// has handlers for Prometheus' format and JSON; see ExpvarName);
// SetLogger receives fallbacks, failed handshakes and connection errors
// through log/slog.
//
// Process-wide state: connections that use the same provider, link and
// local IP share its devices (for soft-RoCE, a device is one UDP socket
// and one receive goroutine, the way a NIC queue is one ring and one
// interrupt): up to one per processor and at most 4, each new connection
// going to the device with the fewest, so that receiving for many
// connections uses several cores. A device is closed 5 s after its last
// connection; and
// addresses that answered like plain TCP servers are remembered for 5
// minutes, so that dialing them again costs no second connect (the conn's
// FallbackReason says so). Leak checkers such as goleak see the device's
// receive loop during those 5 s.
//
// ListenConfig.SniffTimeout (default 200 ms) bounds how long the listener
// waits for a preface before serving a silent client as plain TCP, for
// protocols where the server speaks first.
package netconn
