package wire

import "encoding/binary"

// Duplicate echo, for QPs that negotiated it (an rsock extension on top of
// congestion control; never sent to a peer that did not ask for it). The
// responder of such a QP counts the request packets that arrived a second
// time (a PSN it had already taken or placed), and after a receive batch
// that brought new duplicates sends an RC_DUPLICATE_ECHO packet: a BTH
// whose PSN is the PSN the responder expects next, and a DupEcho header
// with the count, cumulative and wrapping at 2^32, and the PSN of the
// newest duplicate. A duplicate means that the requester sent a packet
// again that had arrived after all: it took reordering or a late
// acknowledgement for a loss, as TCP's DSACK (RFC 2883) tells a TCP
// sender. A lost echo loses no count; the next one carries it.

// RCDuplicateEcho is the opcode of a duplicate echo. It lies in the range
// the IBA leaves to manufacturers (0xC0–0xFF), next to RCECNEcho.
const RCDuplicateEcho Opcode = 0xe2

// DupEchoLen is the length of the DupEcho header.
const DupEchoLen = 8

// DupEcho is a view of the duplicate echo header: the count of duplicate
// request packets received (32 bits), a reserved byte (0), and the PSN
// of the newest one (24 bits). Methods require len(e) >= DupEchoLen.
type DupEcho []byte

// Count returns the count of duplicate request packets received, modulo
// 2^32.
func (e DupEcho) Count() uint32 { return binary.BigEndian.Uint32(e[0:]) }

// PSN returns the PSN of the newest duplicate.
func (e DupEcho) PSN() uint32 { return binary.BigEndian.Uint32(e[4:]) & PSNMask }

// Encode writes the count and the newest duplicate's PSN (its low 24
// bits), with the reserved byte 0.
func (e DupEcho) Encode(count, psn uint32) {
	binary.BigEndian.PutUint32(e[0:], count)
	binary.BigEndian.PutUint32(e[4:], psn&PSNMask)
}
