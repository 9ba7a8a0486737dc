// Package udp is the default soft-RoCE link: RoCEv2 packets carried as the
// payload of datagrams on a kernel UDP socket.
//
// The kernel writes the IP and UDP headers; the link appends the ICRC on
// send and checks it on receive. The ICRC covers the IPv4 ID, which a UDP
// socket can neither choose nor see. The link therefore sends with
// don't-fragment set (IP_PMTUDISC_DO), so Linux writes ID 0, and on receive
// checks the ICRC assuming ID 0: a match is reported as link.ICRCGood and a
// mismatch as link.ICRCUnverified (peers such as rxe send non-zero IDs), or
// as link.ICRCBad with Config.StrictICRC.
//
// Batches of packets move with one sendmmsg or recvmmsg system call each,
// issued directly through golang.org/x/sys/unix on the socket's raw
// connection, so that steady-state Send and Recv do not allocate.
//
// The link is implemented on Linux only; elsewhere Listen returns an error.
package udp

import "net/netip"

// Defaults for the zero values of Config fields.
const (
	// DefaultRecvBuffer is the default socket receive buffer size. The
	// kernel's default holds only a few dozen 4 KiB datagrams, and bursts
	// overflow it.
	DefaultRecvBuffer = 32 << 20
	// DefaultSendBuffer is the default socket send buffer size.
	DefaultSendBuffer = 8 << 20
	// DefaultBatch is the default number of packets per sendmmsg or
	// recvmmsg call.
	DefaultBatch = 64
	// MaxBatch is the largest accepted Config.Batch (the kernel's
	// UIO_MAXIOV limit on the vector length of sendmmsg and recvmmsg).
	MaxBatch = 1024
)

// minPacket is the shortest datagram Recv returns: a BTH (12 bytes) and
// the ICRC (4 bytes).
const minPacket = 12 + 4

// Config configures Listen.
type Config struct {
	// Addr is the local IP and port to bind. The IP must be a specific
	// address, not the unspecified one, because the ICRC covers the source
	// IP. Port 0 means: try link.RoCEv2Port (4791), and if it is taken bind
	// an ephemeral port.
	Addr netip.AddrPort
	// RecvBuffer is the socket receive buffer size in bytes (default
	// DefaultRecvBuffer). It is set with SO_RCVBUFFORCE, which needs
	// CAP_NET_ADMIN, falling back to SO_RCVBUF (capped by
	// net.core.rmem_max).
	RecvBuffer int
	// SendBuffer is the socket send buffer size in bytes (default
	// DefaultSendBuffer), set with SO_SNDBUFFORCE falling back to
	// SO_SNDBUF.
	SendBuffer int
	// Batch is the maximum number of packets per sendmmsg or recvmmsg call
	// (default DefaultBatch, at most MaxBatch).
	Batch int
	// StrictICRC makes Recv report packets whose ICRC does not match (when
	// computed with IPv4 ID 0) as link.ICRCBad instead of
	// link.ICRCUnverified. Use it when every peer is known to send with
	// ID 0, such as another udp link; rxe and RNIC peers send non-zero IDs
	// and their packets would all be reported bad.
	StrictICRC bool
}
