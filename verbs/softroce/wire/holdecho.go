package wire

import "encoding/binary"

// Hold echo, for QPs that negotiated it (an rsock extension on top of
// congestion control; never sent to a peer that did not ask for it). A
// responder in software acknowledges a request only when its process has
// read the packet from its socket and handled it, which on a busy host is
// milliseconds after the packet arrived; a kernel's TCP acknowledges in
// the softirq that received it. So, before each ACK or selective NAK it
// builds at the end of a receive batch, the responder sends an
// RC_HOLD_ECHO packet: a BTH whose PSN is the PSN the responder expects
// next, and a HoldEcho header with how long it held the newest request it
// received, from the kernel's arrival timestamp to the echo, in
// microseconds, and that request's PSN. The requester learns from it how
// much of the round trip it samples for that PSN the peer held, as QUIC
// learns a peer's ack_delay (RFC 9002, section 5.3).

// RCHoldEcho is the opcode of a hold echo. It lies in the range the IBA
// leaves to manufacturers (0xC0–0xFF), next to RCDuplicateEcho.
const RCHoldEcho Opcode = 0xe3

// HoldEchoLen is the length of the HoldEcho header.
const HoldEchoLen = 8

// HoldEcho is a view of the hold echo header: the hold in microseconds
// (32 bits), a reserved byte (0), and the PSN of the request it timed (24
// bits). Methods require len(e) >= HoldEchoLen.
type HoldEcho []byte

// Hold returns the hold in microseconds.
func (e HoldEcho) Hold() uint32 { return binary.BigEndian.Uint32(e[0:]) }

// PSN returns the PSN of the request the hold timed.
func (e HoldEcho) PSN() uint32 { return binary.BigEndian.Uint32(e[4:]) & PSNMask }

// Encode writes the hold in microseconds and the timed request's PSN (its
// low 24 bits), with the reserved byte 0.
func (e HoldEcho) Encode(us, psn uint32) {
	binary.BigEndian.PutUint32(e[0:], us)
	binary.BigEndian.PutUint32(e[4:], psn&PSNMask)
}
