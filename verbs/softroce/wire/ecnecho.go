package wire

import "encoding/binary"

// ECN echo, for QPs that negotiated ECN (an rsock extension; never sent
// to a peer that did not ask for it). The responder of such a QP counts
// the request packets that arrived ECN-capable (ECT(0), ECT(1) or CE) and
// those that arrived CE-marked, and after a receive batch that brought
// new CE marks sends an RC_ECN_ECHO packet: a BTH whose PSN is the PSN
// the responder expects next, and an ECNEcho header with both counts,
// cumulative and wrapping at 2^32 (as AccECN's counters, RFC 9768): a
// lost echo loses no marks, the next one carries them. Unlike RoCEv2's
// CNP (one bit, rate-limited), the counts give the requester the share of
// its packets that were marked, which a DCTCP-style reaction needs.

// RCECNEcho is the opcode of an ECN echo. It lies in the range the IBA
// leaves to manufacturers (0xC0–0xFF), next to RCSelectiveNAK.
const RCECNEcho Opcode = 0xe1

// ECNEchoLen is the length of the ECNEcho header.
const ECNEchoLen = 8

// ECNEcho is a view of the ECN echo header: the count of ECN-capable
// request packets received (32 bits) and the count of those that were
// CE-marked (32 bits). Methods require len(e) >= ECNEchoLen.
type ECNEcho []byte

// ECT returns the count of request packets that arrived ECN-capable
// (ECT(0), ECT(1) or CE), modulo 2^32.
func (e ECNEcho) ECT() uint32 { return binary.BigEndian.Uint32(e[0:]) }

// CE returns the count of request packets that arrived CE-marked, modulo
// 2^32.
func (e ECNEcho) CE() uint32 { return binary.BigEndian.Uint32(e[4:]) }

// Encode writes both counts.
func (e ECNEcho) Encode(ect, ce uint32) {
	binary.BigEndian.PutUint32(e[0:], ect)
	binary.BigEndian.PutUint32(e[4:], ce)
}
