package wire

import "encoding/binary"

// IETH is a view of the 4-byte Invalidate Extended Transport Header carried
// by SEND_*_WITH_INVALIDATE, naming the R_Key to invalidate at the
// responder. Methods require len(i) >= IETHLen.
type IETH []byte

// RKey returns the R_Key to invalidate.
func (i IETH) RKey() uint32 { return binary.BigEndian.Uint32(i) }

// Set writes the R_Key to invalidate.
func (i IETH) Set(v uint32) { binary.BigEndian.PutUint32(i, v) }
