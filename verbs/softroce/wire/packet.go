package wire

import "errors"

// Errors returned by Parse.
var (
	// ErrShort means the packet is shorter than the headers its opcode needs.
	ErrShort = errors.New("wire: packet shorter than its headers")
	// ErrOpcode means the BTH opcode is not a valid RC opcode.
	ErrOpcode = errors.New("wire: not a valid RC opcode")
	// ErrVersion means the BTH transport version is not 0.
	ErrVersion = errors.New("wire: unsupported BTH transport version")
	// ErrPad means payload plus pad is not a multiple of 4 bytes, or the
	// pad count exceeds the bytes after the headers.
	ErrPad = errors.New("wire: bad pad count or unaligned payload")
	// ErrPayload means an opcode that carries no payload has trailing bytes.
	ErrPayload = errors.New("wire: trailing bytes after a payload-less packet")
	// ErrSplit means the head given to ParseSplit is not exactly the
	// packet's headers.
	ErrSplit = errors.New("wire: split packet's head is not its headers")
)

// Packet holds views into a parsed RC packet (BTH through pad, without
// the ICRC). Views for headers the opcode does not carry are nil. All views
// alias the buffer given to Parse and have their capacity capped at their
// length.
type Packet struct {
	// BTH is the base transport header (always set after a successful Parse).
	BTH BTH
	// RETH is set for RDMA WRITE first/only and RDMA READ requests.
	RETH RETH
	// AETH is set for ACKs, atomic ACKs and RDMA READ response first/last/only.
	AETH AETH
	// Imm is set for the *_WITH_IMMEDIATE opcodes.
	Imm ImmDt
	// IETH is set for the SEND_*_WITH_INVALIDATE opcodes.
	IETH IETH
	// AtomicETH is set for COMPARE_SWAP and FETCH_ADD.
	AtomicETH AtomicETH
	// AtomicAckETH is set for ATOMIC_ACKNOWLEDGE.
	AtomicAckETH AtomicAckETH
	// ECNEcho is set for RC_ECN_ECHO.
	ECNEcho ECNEcho
	// DupEcho is set for RC_DUPLICATE_ECHO.
	DupEcho DupEcho
	// HoldEcho is set for RC_HOLD_ECHO.
	HoldEcho HoldEcho
	// Payload is the payload without pad bytes; nil for opcodes without
	// payload and empty (non-nil) for a zero-length payload.
	Payload []byte
}

// Opcode returns the packet's opcode (p.BTH must be set).
func (p *Packet) Opcode() Opcode { return p.BTH.Opcode() }

// PadFor returns the number of pad bytes (0-3) needed after an n-byte
// payload to reach a multiple of 4.
func PadFor(n int) int { return (4 - n%4) % 4 }

// view returns b[off:off+n] with its capacity capped.
func view(b []byte, off, n int) []byte { return b[off : off+n : off+n] }

// Parse splits an RC packet, from the BTH through the pad bytes (the ICRC
// already removed), into header views and payload. It does not copy or
// allocate, and it never panics. Header order after the BTH follows the
// IBA: RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH (and rsock's
// ECNEcho, DupEcho or HoldEcho, alone after the BTH).
func Parse(b []byte) (Packet, error) { return parse(b, nil, false) }

// ParseSplit is Parse for a packet held in two pieces: head is exactly its
// headers, the BTH through the last extended transport header, and tail
// the payload and pad bytes (the ICRC removed). Header views point into
// head and Payload into tail.
func ParseSplit(head, tail []byte) (Packet, error) { return parse(head, tail, true) }

// parse is Parse, or with split ParseSplit.
func parse(b, tail []byte, split bool) (Packet, error) {
	var p Packet
	if len(b) < BTHLen {
		return p, ErrShort
	}
	info := &opTable[b[bthOpcode]]
	if info.hlen == 0 {
		return p, ErrOpcode
	}
	bth := BTH(view(b, 0, BTHLen))
	if bth.TVer() != 0 {
		return p, ErrVersion
	}
	hl := int(info.hlen)
	if len(b) < hl {
		return p, ErrShort
	}
	rest := len(b) - hl
	if split {
		if rest != 0 {
			return p, ErrSplit
		}
		rest = len(tail)
	}
	f := info.flags
	if rest != 0 && f&FlagPayload == 0 {
		return p, ErrPayload
	}
	if rest%4 != 0 {
		return p, ErrPad
	}
	pad := bth.PadCount()
	if pad > rest {
		return p, ErrPad
	}
	p.BTH = bth
	off := BTHLen
	if f&FlagRETH != 0 {
		p.RETH = view(b, off, RETHLen)
		off += RETHLen
	}
	if f&FlagAtomicETH != 0 {
		p.AtomicETH = view(b, off, AtomicETHLen)
		off += AtomicETHLen
	}
	if f&FlagAETH != 0 {
		p.AETH = view(b, off, AETHLen)
		off += AETHLen
	}
	if f&FlagAtomicAckETH != 0 {
		p.AtomicAckETH = view(b, off, AtomicAckETHLen)
		off += AtomicAckETHLen
	}
	if f&FlagImm != 0 {
		p.Imm = view(b, off, ImmDtLen)
		off += ImmDtLen
	}
	if f&FlagIETH != 0 {
		p.IETH = view(b, off, IETHLen)
	}
	if f&FlagECNEcho != 0 {
		p.ECNEcho = view(b, off, ECNEchoLen)
	}
	if f&FlagDupEcho != 0 {
		p.DupEcho = view(b, off, DupEchoLen)
	}
	if f&FlagHoldEcho != 0 {
		p.HoldEcho = view(b, off, HoldEchoLen)
	}
	switch {
	case f&FlagPayload == 0:
	case split:
		p.Payload = view(tail, 0, rest-pad)
	default:
		p.Payload = view(b, hl, rest-pad)
	}
	return p, nil
}
