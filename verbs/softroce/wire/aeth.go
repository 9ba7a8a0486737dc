package wire

import "encoding/binary"

// AETH is a view of the 4-byte ACK Extended Transport Header: an 8-bit
// syndrome followed by a 24-bit message sequence number (MSN). It is
// carried by ACKNOWLEDGE, ATOMIC_ACKNOWLEDGE and RDMA READ response
// first/last/only packets. Methods require len(a) >= AETHLen.
type AETH []byte

// Syndrome returns the syndrome byte.
func (a AETH) Syndrome() Syndrome { return Syndrome(a[0]) }

// MSN returns the 24-bit message sequence number.
func (a AETH) MSN() uint32 { return binary.BigEndian.Uint32(a) & PSNMask }

// Encode writes the syndrome and the MSN (truncated to 24 bits).
func (a AETH) Encode(s Syndrome, msn uint32) {
	binary.BigEndian.PutUint32(a, uint32(s)<<24|msn&PSNMask)
}

// Syndrome is the AETH syndrome: bit 7 reserved, bits 6-5 the kind
// (ACK, RNR NAK, NAK) and bits 4-0 a kind-specific value.
type Syndrome uint8

// SyndromeKind says what an AETH syndrome reports.
type SyndromeKind uint8

// Syndrome kinds.
const (
	// SyndromeACK is a positive acknowledgement; the value is the credit count.
	SyndromeACK SyndromeKind = iota
	// SyndromeRNR is a receiver-not-ready NAK; the value is the RNR timer code.
	SyndromeRNR
	// SyndromeNAK is a negative acknowledgement; the value is a NAKCode.
	SyndromeNAK
	// SyndromeReserved is any reserved encoding.
	SyndromeReserved
)

// String returns the kind's name.
func (k SyndromeKind) String() string {
	switch k {
	case SyndromeACK:
		return "ACK"
	case SyndromeRNR:
		return "RNR_NAK"
	case SyndromeNAK:
		return "NAK"
	}
	return "RESERVED"
}

// Syndrome kind encodings in bits 7-5.
const (
	synKindMask = 0xe0
	synValMask  = 0x1f
	synACK      = 0x00
	synRNR      = 0x20
	synNAK      = 0x60
)

// CreditsInvalid is the ACK credit code meaning "no credit count is
// conveyed" (as in the reference vectors, syndrome 0x1f).
const CreditsInvalid = 0x1f

// Kind classifies the syndrome from its bits 7-5: 000 ACK, 001 RNR NAK,
// 011 NAK; anything else is SyndromeReserved.
func (s Syndrome) Kind() SyndromeKind {
	switch s & synKindMask {
	case synACK:
		return SyndromeACK
	case synRNR:
		return SyndromeRNR
	case synNAK:
		return SyndromeNAK
	}
	return SyndromeReserved
}

// Value returns the low 5 bits: the credit count code for an ACK, the
// timer code for an RNR NAK, the NAKCode for a NAK.
func (s Syndrome) Value() uint8 { return uint8(s) & synValMask }

// ACKSyndrome returns an ACK syndrome with the given credit code (5 bits).
func ACKSyndrome(credits uint8) Syndrome { return Syndrome(synACK | credits&synValMask) }

// RNRSyndrome returns an RNR NAK syndrome with the given timer code (5 bits).
func RNRSyndrome(timer uint8) Syndrome { return Syndrome(synRNR | timer&synValMask) }

// NAKSyndrome returns a NAK syndrome with the given code.
func NAKSyndrome(code NAKCode) Syndrome { return Syndrome(synNAK | uint8(code)&synValMask) }

// String describes the syndrome, e.g. "ACK(credits=31)", "RNR_NAK(timer=14)"
// or "NAK(PSN_SEQ_ERR)".
func (s Syndrome) String() string {
	v := s.Value()
	switch s.Kind() {
	case SyndromeACK:
		return "ACK(credits=" + itoa(v) + ")"
	case SyndromeRNR:
		return "RNR_NAK(timer=" + itoa(v) + ")"
	case SyndromeNAK:
		return "NAK(" + NAKCode(v).String() + ")"
	}
	return "Syndrome(0x" + hex2(uint8(s)) + ")"
}

// NAKCode is the value of a NAK syndrome.
type NAKCode uint8

// NAK codes (IBA Table 44).
const (
	// NAKPSNSeqErr is a PSN sequence error: the responder expected another PSN.
	NAKPSNSeqErr NAKCode = 0
	// NAKInvalidRequest is an invalid request.
	NAKInvalidRequest NAKCode = 1
	// NAKRemoteAccess is a remote access error (bad R_Key, bounds, rights).
	NAKRemoteAccess NAKCode = 2
	// NAKRemoteOp is a remote operational error.
	NAKRemoteOp NAKCode = 3
	// NAKInvalidRDRequest is an invalid RD request.
	NAKInvalidRDRequest NAKCode = 4
)

// String returns the NAK code's name, or "code=N" for a reserved code.
func (c NAKCode) String() string {
	switch c {
	case NAKPSNSeqErr:
		return "PSN_SEQ_ERR"
	case NAKInvalidRequest:
		return "INVALID_REQUEST"
	case NAKRemoteAccess:
		return "REMOTE_ACCESS_ERR"
	case NAKRemoteOp:
		return "REMOTE_OP_ERR"
	case NAKInvalidRDRequest:
		return "INVALID_RD_REQUEST"
	}
	return "code=" + itoa(uint8(c))
}

const hexDigits = "0123456789abcdef"

func hex2(v uint8) string { return string([]byte{hexDigits[v>>4], hexDigits[v&0xf]}) }

func itoa(v uint8) string {
	if v < 10 {
		return string([]byte{'0' + v})
	}
	if v < 100 {
		return string([]byte{'0' + v/10, '0' + v%10})
	}
	return string([]byte{'0' + v/100, '0' + v/10%10, '0' + v%10})
}
