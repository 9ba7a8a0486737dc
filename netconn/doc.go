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
// example "rdma/softroce/udp"), "rdma/shm" or "tcp", and FallbackReason (the text of
// FallbackError, a *FallbackError with a Kind and a Side) says why a conn
// that could have run on RDMA runs on TCP.
//
// What a connection runs on is decided by one pure function, ChoosePlan,
// from the settings, the two addresses, what the host has (an rdma-core
// device, a free memif slot) and the peer's Hello. By default (auto) it
// never runs slower than TCP: on one host, shm (verbs/shm: queue pairs in
// memory the two processes share, one channel per pair of processes),
// else memif; between hosts, an rdma-core device with a
// RoCEv2 GID for the local address at both ends; else TCP, with the
// reason FallbackNoFastPath. Soft-RoCE over the kernel's UDP is slower
// than TCP and runs only when a setting names it (RSOCK_LINK=udp, or
// RSOCK_PROVIDER=softroce between hosts), or for a dialer that asks for it
// (an rdma-core device, or one whose RSOCK_LINK is udp).
//
// How a connection is made: the dialer plans before it acquires any
// device. On TCP it sends nothing of its own. Otherwise it connects over
// TCP and sends a versioned preface and a Hello with its queue pair and
// receive ring, or (on one host) its shm or memif offer (package fallback). The
// listener sniffs every accepted connection: a plain TCP client (curl, a
// plain net.Dial) is served as plain TCP with the sniffed bytes replayed;
// an rsock dialer is answered Accept, with the listener's parameters, or
// Decline, which names only the kind of the reason. After the handshake
// the TCP connection stays open as the liveness channel: when the peer
// process dies its kernel closes the socket and the stream fails at once.
// Over shm it closes instead once both sides confirmed (the connection
// keeps its addresses): the channel's own socket fails every stream on it
// when the peer process dies, and a peer that gives one connection up
// destroys its queue pair, which fails ours once what it sent before is
// read; an shm connection holds no TCP socket or goroutine of its own.
// Data goes over RDMA. A dialer that reaches a plain TCP server reconnects
// plainly and remembers that address for a while. A Decline, a provider
// that cannot start, or a failed queue pair setup leaves both sides on the
// same TCP connection.
//
// What a Hello says is checked against what TCP established: a RoCE
// peer's GID must be the address the TCP connection reached (both ways,
// IPv4-mapped or not), so that no peer can aim a connection's RDMA traffic
// at a third host; and shm and memif are offered to, and taken from, only
// a peer on this host, only as a socket this package makes (or an shm
// channel to the same process), checked with SO_PEERCRED against the
// process that holds the TCP peer's socket. A connection that reuses an
// shm channel is bound to it instead, both ways: a fresh token in the
// Hello (and Accept) whose binding to this TCP connection came over the
// channel (shmbind.go); a reuse that is not bound falls back
// (FallbackShmBinding).
//
// Knobs, in the config structs and the environment (the struct wins):
//
//	RSOCK_PROVIDER  auto (default) | shm | softroce | rdmacore | tcp
//	                auto: shm on one host (then memif), rdmacore where
//	                it has a device, else TCP; shm: shm only (on one
//	                host, else TCP); softroce: soft-RoCE always (memif on
//	                one host, else udp); tcp turns RDMA off.
//	RSOCK_LINK      auto (default) | shm | memif | udp | dpdk: the link.
//	                auto picks per connection as above; shm demands a
//	                peer process on this host and falls back to TCP
//	                without it; udp runs
//	                soft-RoCE over a kernel UDP socket (it reaches RNICs
//	                and rxe); memif demands shared memory on one host and
//	                falls back to TCP without it; dpdk runs soft-RoCE on
//	                a DPDK port (binaries built with -tags dpdk that import
//	                verbs/softroce/link/dpdk, configured by RSOCK_DPDK_*).
//	                A link the setting names is kept: the connection runs
//	                on it or on TCP.
//	RSOCK_MEMIF_WIRE, RSOCK_MEMIF_SECRET
//	                an external memif server (dpdk-testpmd, VPP) that the
//	                process's soft-RoCE devices share as their wire.
//	RSOCK_RING_SIZE receive and send ring bytes per connection, a power of
//	                two from 4096 to 67108864 (default 4 MiB on the udp and
//	                dpdk links, 2 MiB on shm, 1 MiB on memif, 524288
//	                otherwise).
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
// local IP share its devices (a memif connection has its own) (for soft-RoCE, a device is one UDP socket
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
