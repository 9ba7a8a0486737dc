// Package udp is the default soft-RoCE link: RoCEv2 packets carried as the
// payload of datagrams on a kernel UDP socket.
//
// The kernel writes the IP and UDP headers; the link appends the ICRC on
// send and checks it on receive. The ICRC covers the IPv4 ID, which a UDP
// socket can neither choose nor see. The link therefore sends with
// don't-fragment set, so that Linux writes ID 0 into a plain datagram.
//
// It sets don't-fragment with IP_PMTUDISC_PROBE (IPV6_PMTUDISC_PROBE), not
// IP_PMTUDISC_DO: the kernel then sends datagrams up to the interface's MTU
// whatever path MTU it learned from ICMP. An ICMP "fragmentation needed" or
// "packet too big" can come from anyone who guesses a flow's addresses and
// ports, and with IP_PMTUDISC_DO one of them made every larger send fail
// with EMSGSIZE for ten minutes. The IPv4 ID stays 0 (on Linux 6.18,
// checked on a veth capture by TestWireGSOIPv4ID); a kernel that numbers
// these datagrams instead is still understood by the receiver (see below),
// at 16 bits of check instead of 32. A real drop of the path MTU below a
// connection's packets shows as their loss; see the engine's retries.
// RouteMTU, for the same reason, reads the route as configured, not the
// path MTU learned from ICMP.
//
// Batches of packets move with one sendmmsg or recvmmsg system call each,
// issued directly through golang.org/x/sys/unix on the socket's raw
// connection, so that steady-state Send and Recv do not allocate.
//
// Where the kernel has them, the link also uses UDP segmentation offload
// (GSO, UDP_SEGMENT) and UDP receive coalescing (GRO, UDP_GRO). Send groups
// each run of consecutive packets with the same destination and the same
// length (the last of a run may be shorter) into one message of up to 64
// segments and under 64 KiB, which the kernel splits into datagrams as late
// as possible: on loopback not at all when the receiver has GRO enabled.
// When Linux segments such a message it gives segment i the IPv4 ID i
// (0, 1, 2, ...; measured by TestWireGSOIPv4ID on a veth pair), so Send
// computes segment i's ICRC with ID i. Recv receives coalesced messages
// into preallocated scratch buffers and splits them into packets again,
// which it returns as views into the scratch without copying them (the
// link.Link contract lets a link replace Packet.Buf on Recv).
//
// On receive the ICRC is checked with, in turn, the ID the packet would have
// had if its message was segmented (its index in a coalesced message), ID 0,
// and IDs 1 to 63 (the IDs a segmented GSO message of this link carries,
// when the receiver saw the datagrams one by one). A match is reported as
// link.ICRCGood. Otherwise, over IPv4, the link solves for the ID (and
// don't-fragment) that would make the ICRC match: the ICRC's difference is
// linear in those 17 bits, so one small elimination per packet length
// decides it. A packet that some other ID explains (peers such as rxe
// number their datagrams) is link.ICRCUnverified, or link.ICRCBad with
// Config.StrictICRC; one that no ID explains is link.ICRCBad, strict or
// not. Over IPv6 the link sees every covered field, and any mismatch is
// link.ICRCBad.
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
	// DefaultBatch is the default number of messages per sendmmsg or
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
	// Batch is the maximum number of messages per sendmmsg or recvmmsg
	// call (default DefaultBatch, at most MaxBatch). A message is one
	// datagram, or with GSO or GRO a run of up to 64 packets; with GRO,
	// recvmmsg takes at most 64 messages (into 64 KiB of scratch each).
	Batch int
	// StrictICRC makes Recv report IPv4 packets whose ICRC matches only
	// with an IPv4 ID a udp link does not send (it sends 0 to 63) as
	// link.ICRCBad instead of link.ICRCUnverified. Use it when every peer
	// is known to be another udp link; rxe and RNIC peers send other IDs
	// and most of their packets would be reported bad. A packet whose
	// ICRC no ID explains is link.ICRCBad either way.
	StrictICRC bool
	// DisableGSO turns off UDP segmentation offload on send: every packet
	// then goes out as its own datagram (still batched with sendmmsg). GSO
	// is also turned off by itself if the kernel refuses it, at Listen or
	// at the first message it rejects with EINVAL or EIO (for example a
	// segment size above the path MTU).
	DisableGSO bool
	// DisableGRO turns off UDP receive coalescing: datagrams are then
	// received one by one with recvmmsg straight into the callers'
	// buffers, instead of into the link's scratch buffers from which
	// Recv returns views. GRO is also off if the kernel refuses UDP_GRO
	// at Listen.
	DisableGRO bool
}
