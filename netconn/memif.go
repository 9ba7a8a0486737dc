package netconn

import (
	"errors"
	"net/netip"
	"sync/atomic"
)

// Same-host connections over memif.
//
// A dialer whose peer is on its own host (the peer's IP is a loopback
// address or its own) offers a memif link in its Hello, beside its udp
// endpoint: it listens on a fresh abstract Unix socket with a fresh
// 128-bit secret and sends both. A listener that can use memif connects
// to that socket as memif client, presenting the secret, and answers
// with a Hello for a queue pair on a device of its own over that link;
// the dialer then makes its queue pair on a device over the accepted link
// and confirms with that pair's Hello. Each connection has its own memif
// link and device (a pair of rings is the connection's private wire).
//
// The socket is abstract, so that no file is left behind by a process
// killed mid-handshake; it takes one client, and closes as soon as that
// one connected or the handshake ended. Each side checks the other's
// process with SO_PEERCRED (internal/peercred): it must run as the owner
// of the TCP peer's socket and hold that socket (found with sock_diag);
// anyone else is closed before a message, and neither they nor clients
// with a wrong secret end the offer. Only root (who could read the rings
// anyway) or the peer process itself can get past that.
//
// When memif cannot be set up, the connection runs over udp with auto,
// and over TCP with memif; FallbackReason says why. The memif link is
// Linux's (memfd, eventfd, abstract sockets); elsewhere memif is never
// set up (memif_other.go).

const (
	// memifLog2Ring is log2 of each memif ring's descriptors: a queue
	// pair's default window (512 packets) fits.
	memifLog2Ring = 9
	// memifBufferSize holds one frame of a 4096-byte RoCE MTU (Ethernet,
	// IPv6, UDP, BTH, RETH, ImmDt, payload and ICRC: 4196 bytes) in one
	// buffer.
	memifBufferSize = 4224
	// memifRingSize is the stream ring size of a memif connection when
	// none is configured, twice rsock's default: a credit report per
	// 256 KiB read instead of per 128 KiB, and more in flight, gave the
	// 64 KiB stream about a quarter more throughput and less CPU per byte
	// on both sides. It costs 2 MiB more address space per connection,
	// mapped as used, and a process has at most maxMemifConns of them.
	memifRingSize = 1 << 20
)

// maxMemifConns bounds the memif connections of a process: each has its
// own link (4.3 MiB of shared memory, four file descriptors) and receive
// goroutine, so further same-host connections use udp. A variable for
// tests.
var maxMemifConns int64 = 64

// memifConns counts the process's memif slots taken: open memif devices,
// and handshakes that may open one (see reserveMemif).
var memifConns atomic.Int64

// errMemifFull is why a connection does not use memif when the process
// has maxMemifConns of them.
var errMemifFull = errors.New("this process has the most memif connections it opens; this one uses udp")

// reserveMemif takes one of the process's maxMemifConns memif slots, or
// reports false when all are taken. It is taken when a handshake offers
// or takes memif, not when the device opens a handshake later, so that
// concurrent handshakes cannot all pass the cap. The slot is given back
// with releaseMemif, or passes to the device that acceptOffer or
// connectOffer opens, which gives it back when it closes; those two give
// it back themselves when they fail.
func reserveMemif() bool {
	for {
		n := memifConns.Load()
		if n >= maxMemifConns {
			return false
		}
		if memifConns.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// releaseMemif gives back a slot from reserveMemif that opened no device.
func releaseMemif() { memifConns.Add(-1) }

// sameHost reports whether a TCP connection from local to remote stays on
// this host (and network namespace, where abstract sockets live).
func sameHost(local, remote netip.Addr) bool {
	local, remote = local.Unmap(), remote.Unmap()
	return remote.IsLoopback() || remote == local
}
