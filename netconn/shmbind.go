package netconn

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
)

// Binding a connection to a reused shm channel.
//
// The first connection between two processes checks the new channel's
// peer process (SO_PEERCRED) against the TCP peer: it must hold the
// other end of this TCP connection (internal/peercred, a scan of its
// /proc/PID/fd). A later connection that reuses the channel does not
// scan /proc, whose cost grows with the peer's descriptors: it is bound
// to the channel instead, in both directions.
//
//   - The dialer draws a fresh random 128-bit token, sends the binding
//     H("dialer", token, dialer's address, listener's address) of this
//     TCP connection over the channel's Unix socket, then the token and
//     the channel's ID in its Hello. The listener takes the reuse only if
//     the binding it computes from the Hello's token and its own view of
//     the connection's addresses arrived on that very channel (each
//     binding is taken once, and kept at most a minute).
//   - The listener answers the same way, with a binding labelled
//     "listener" and a token of its own in its Accept; the dialer
//     connects its queue pair only if that binding arrived on the
//     channel.
//
// Why it is sound: only the channel's peer process can send on the
// channel's socket, and that process was checked against a TCP peer when
// the channel was set up. A binding names one TCP connection (its four
// addresses, unique on the host while it is open) and a token that only
// the two ends of that connection saw; H is SHA-256, so a binding tells
// nothing about the token. So a listener that took the binding knows
// that the channel's peer process vouched for this very TCP connection
// as its own, just now:
//   - a third process that names another pair's channel in a Hello, with
//     a guessed or stale token, finds no binding (and could not make one:
//     it cannot send on that channel);
//   - a process that received a dialer's Hello (one of two processes
//     sharing the port with SO_REUSEPORT, which need not be the one the
//     dialer's channel goes to) and replays it to the channel's process
//     over a TCP connection of its own fails: the binding names the
//     dialer's connection, not the replayer's; and it cannot answer the
//     dialer in the channel process's name either, for the dialer takes
//     only a binding sent on the channel by the listener that holds the
//     dialer's very connection (the other process of the port has no
//     channel with that ID, and declines);
//   - a process that dials itself has both ends of the channel, which
//     share one ID; the labels keep a side from taking its own binding.
// A reuse that finds no binding is declined with FallbackShmBinding
// (the connection runs on TCP), never waited for: the sender's binding
// is queued at the receiver before its Hello or Accept goes out over
// TCP.

// Roles a binding is labelled with.
const (
	bindDialer   = 'd'
	bindListener = 'l'
)

// errShmUnbound is why a side does not take a proposal to reuse a
// channel: the peer's binding did not arrive on it.
var errShmUnbound = errors.New("the proposal to reuse the shm channel is not bound to this connection on it")

// setupKind is the fallback kind of a same-host link's setup failure.
func setupKind(err error) string {
	if errors.Is(err, errShmUnbound) {
		return FallbackShmBinding
	}
	return FallbackSetup
}

// shmBinding is the binding of the TCP connection from dialer to
// listener, with token, sent over the channel by the side role.
func shmBinding(role byte, token [16]byte, dialer, listener netip.AddrPort) [16]byte {
	h := sha256.New()
	var b [16 + 2]byte
	h.Write([]byte("rsock shm binding 1"))
	h.Write([]byte{role})
	h.Write(token[:])
	for _, a := range [2]netip.AddrPort{dialer, listener} {
		ip := a.Addr().Unmap().As16()
		copy(b[:], ip[:])
		binary.BigEndian.PutUint16(b[16:], a.Port())
		h.Write(b[:])
	}
	var out [16]byte
	copy(out[:], h.Sum(nil))
	return out
}

// newShmToken draws a fresh non-zero token.
func newShmToken() [16]byte {
	var t [16]byte
	for t == ([16]byte{}) {
		rand.Read(t[:])
	}
	return t
}

// tcpEnds returns the dialer's and the listener's address of tcp, seen
// from this side (listener: this is the listening side).
func tcpEnds(tcp net.Conn, listener bool) (dialer, lis netip.AddrPort) {
	local := addrPort(tcp.LocalAddr())
	remote := addrPort(tcp.RemoteAddr())
	if listener {
		return remote, local
	}
	return local, remote
}
