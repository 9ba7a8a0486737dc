package wire

import "encoding/binary"

// ImmDt is a view of the 4-byte Immediate Data header carried by the
// *_WITH_IMMEDIATE opcodes. Methods require len(i) >= ImmDtLen.
type ImmDt []byte

// Imm returns the immediate value as a big-endian 32-bit number.
func (i ImmDt) Imm() uint32 { return binary.BigEndian.Uint32(i) }

// Set writes the immediate value.
func (i ImmDt) Set(v uint32) { binary.BigEndian.PutUint32(i, v) }
