// Package link defines how the soft-RoCE engine moves RoCEv2 packets: a Link
// sends and receives the UDP payload of RoCEv2 packets (BTH through ICRC) to
// and from peers named by IP address and UDP port.
//
// Implementations live in sub-packages: udp (the default, a kernel UDP
// socket) and pipe (an in-memory wire with fault injection, for tests).
package link

import (
	"errors"
	"net/netip"
)

// RoCEv2Port is the IANA UDP destination port of RoCEv2.
const RoCEv2Port = 4791

// ErrClosed is returned by Send and Recv once the link is closed.
var ErrClosed = errors.New("link: closed")

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

// Packet is one RoCEv2 packet buffer exchanged with a Link. The caller owns
// Buf; a Link never retains it after Send or Recv returns.
type Packet struct {
	// Buf is the backing storage. For Send, cap(Buf) must be at least N+4 so
	// the link can append the ICRC in place. For Recv, len(Buf) bounds the
	// packet size that can be received.
	Buf []byte
	// N is the packet length from the BTH up to and including the pad
	// bytes, without the ICRC. On Send the link appends the 4-byte ICRC
	// after Buf[:N]; on Recv the link strips it.
	N int
	// Addr is the peer: the destination on Send, the source on Recv.
	Addr netip.AddrPort
	// ICRC is set by Recv.
	ICRC ICRCStatus
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
	Recv(pkts []Packet) (n int, err error)
	// Close releases the link. It is idempotent.
	Close() error
}
