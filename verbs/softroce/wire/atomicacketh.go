package wire

import "encoding/binary"

// AtomicAckETH is a view of the 8-byte Atomic ACK Extended Transport Header
// carried by ATOMIC_ACKNOWLEDGE: the value the target held before the
// atomic operation. Methods require len(a) >= AtomicAckETHLen.
type AtomicAckETH []byte

// OrigData returns the original value of the atomic target.
func (a AtomicAckETH) OrigData() uint64 { return binary.BigEndian.Uint64(a) }

// Set writes the original value of the atomic target.
func (a AtomicAckETH) Set(v uint64) { binary.BigEndian.PutUint64(a, v) }
