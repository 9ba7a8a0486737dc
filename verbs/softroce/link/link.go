// Package link defines how the soft-RoCE engine moves RoCEv2 packets: a Link
// sends and receives the UDP payload of RoCEv2 packets (BTH through ICRC) to
// and from peers named by IP address and UDP port.
//
// Implementations live in sub-packages: udp (the default, a kernel UDP
// socket), memif (shared memory), pipe (an in-memory wire with fault
// injection, for tests) and, behind the build tag dpdk, dpdk. Links behind
// build tags register themselves (Register) so that their users find them
// by name without importing them.
package link

import (
	"errors"
	"net/netip"

	"github.com/rsock-go/rsock/verbs"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2 (verbs.RoCEv2Port).
const RoCEv2Port = verbs.RoCEv2Port

// ErrClosed is returned by Send and Recv once the link is closed.
var ErrClosed = errors.New("link: closed")

// DropCounter is implemented by links that drop datagrams before they
// become packets: shorter than a BTH and an ICRC, truncated, or of a
// foreign address family. The device counts them as malformed.
type DropCounter interface {
	// Dropped returns how many datagrams were dropped so far.
	Dropped() uint64
}

// ICRCStatus says what a link could establish about a received packet's ICRC.
type ICRCStatus uint8

const (
	// ICRCGood means the ICRC was computed over the packet as received and matched.
	ICRCGood ICRCStatus = iota
	// ICRCUnverified means the link could not check the ICRC, because it does
	// not see every covered header field (a UDP socket does not see the
	// IPv4 ID, and peers such as rxe send non-zero IDs).
	ICRCUnverified
	// ICRCBad means the ICRC could be checked and did not match. The engine
	// must drop the packet.
	ICRCBad
)

func (s ICRCStatus) String() string {
	switch s {
	case ICRCGood:
		return "good"
	case ICRCUnverified:
		return "unverified"
	case ICRCBad:
		return "bad"
	}
	return "invalid"
}

// ECN is an IP ECN codepoint (RFC 3168).
type ECN uint8

// ECN codepoints.
const (
	// ECNNotECT marks a packet whose transport does not react to CE.
	ECNNotECT ECN = 0
	// ECNECT1 is ECT(1), which RFC 9331 gives to L4S.
	ECNECT1 ECN = 1
	// ECNECT0 is ECT(0), the classic ECN-capable codepoint.
	ECNECT0 ECN = 2
	// ECNCE is Congestion Experienced, set by a queue on an ECT packet.
	ECNCE ECN = 3
)

// Packet is one RoCEv2 packet buffer exchanged with a Link. A Link never
// retains a Buf the caller passed in after Send or Recv returns. Recv may
// however replace Buf with a view of memory the link owns; see Link.Recv.
type Packet struct {
	// Buf is the backing storage. For Send, cap(Buf) must be at least N+4 so
	// the link can append the ICRC in place. For Recv, a link that receives
	// into the caller's buffers drops packets longer than len(Buf)-4; a
	// link that returns views of its own memory ignores the Buf passed in.
	Buf []byte
	// N is the packet length from the BTH up to and including the pad
	// bytes, without the ICRC. On Send the link appends the 4-byte ICRC
	// after Buf[:N]; on Recv the link strips it.
	N int
	// Addr is the peer: the destination on Send, the source on Recv.
	Addr netip.AddrPort
	// ICRC is set by Recv.
	ICRC ICRCStatus
	// ECN is the packet's IP ECN codepoint (the low two bits of the IPv4
	// TOS or IPv6 traffic class). On Send, the codepoint a link that
	// writes it (udp) sends the packet with; the engine sets one other
	// than ECNNotECT only for queue pairs that negotiated ECN. On Recv,
	// the codepoint the packet arrived with, on links that read it (udp,
	// dpdk); others leave ECNNotECT.
	ECN ECN
	// Arrived is when the packet arrived, by the host's clock
	// (time.Now().UnixNano(), CLOCK_REALTIME), as the link's kernel
	// stamped it; 0 when the link does not tell.
	Arrived int64
	// Tail, when not nil, is the rest of the packet, left where it is
	// instead of copied: the packet is Buf[:N] (then only its headers,
	// BTH through the extended transport headers) followed by Tail (the
	// payload and pad bytes).
	//
	// On Recv, a Looper sets it for a packet whose payload lies in memory
	// it shares with its peer (memif), valid as Buf is; cap(Tail) is at
	// least len(Tail)+4, the ICRC following it. The peer can still write
	// those bytes: they are read once, by the copy that places them.
	//
	// On Send, the engine sets it, to registered memory, only on a link
	// that is a TailSender; the link reads it before Send returns.
	Tail []byte
}

// Bytes returns Buf[:N].
func (p *Packet) Bytes() []byte { return p.Buf[:p.N] }

// Link moves RoCEv2 packets. Send and Recv may be called concurrently with
// each other and with themselves; Close unblocks both.
type Link interface {
	// Name identifies the link type, e.g. "udp" or "pipe".
	Name() string
	// LocalAddr is the address peers send to.
	LocalAddr() netip.AddrPort
	// Send transmits pkts in order, appending each one's ICRC. It returns
	// only after every packet was handed to the wire (or dropped by it), or
	// with an error if the link failed or was closed.
	Send(pkts []Packet) error
	// Recv blocks until at least one packet arrives, fills pkts[:n] (Buf
	// contents, N, Addr and ICRC) and returns n. After Close it returns
	// ErrClosed.
	//
	// A link may fill a packet without copying by setting pkts[i].Buf to a
	// slice of memory it owns, with capacity at least N+4. That memory stays
	// valid and unmodified until the next Recv call on the link begins (by
	// any goroutine), and may be overwritten from then on: the caller must
	// finish with the packets, or copy them out, before it calls Recv again,
	// must not keep such a Buf beyond that, and must not write to it past N.
	// The caller's own Buf slices may end up in other entries of pkts or be
	// dropped from it (a link may also permute them); the caller passes
	// pkts back on the next call with whatever Buf slices it finds there
	// and must not assume that any pkts[i].Buf is one of its own buffers.
	// Links that copy into the caller's buffers satisfy this contract too.
	Recv(pkts []Packet) (n int, err error)
	// Close releases the link. It is idempotent.
	Close() error
}

// A TailSender is a Link whose Send takes packets in two pieces
// (Packet.Tail), so that the engine need not copy a payload into Buf
// before the link copies it again.
type TailSender interface {
	Link
	// SendsTails reports that Send takes Packet.Tail.
	SendsTails() bool
}

// A Looper is a Link that can run the receive loop itself: RecvLoop
// receives as Recv does and calls handle with each batch, pkts[:n] with
// n > 0, until the link is closed, when it returns ErrClosed (or a
// failure). The packets of a batch are valid until handle returns, as
// those of Recv are until the next Recv call. One goroutine calls it, and
// Recv is not called meanwhile.
//
// A link implements it when it waits for arrivals more cheaply inside one
// loop than across Recv calls: a socket read that returned fewer datagrams
// than asked for emptied the socket, and the loop can wait for the next
// arrival without first asking again.
type Looper interface {
	RecvLoop(pkts []Packet, handle func([]Packet)) error
}

// A PathMTUHinter is a Link that can tell the IP MTU toward a peer as the
// host learned it, from ICMP perhaps ("fragmentation needed", "packet too
// big"), which anyone can forge. The engine uses it only to explain why a
// queue pair's packets stopped getting through, never to act on.
type PathMTUHinter interface {
	// PathMTUHint returns the IP MTU toward dst, or false if unknown.
	PathMTUHint(dst netip.Addr) (int, bool)
}
