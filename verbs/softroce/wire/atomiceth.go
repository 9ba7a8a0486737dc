package wire

import "encoding/binary"

// AtomicETH is a view of the 28-byte Atomic Extended Transport Header
// carried by COMPARE_SWAP and FETCH_ADD: a 64-bit virtual address, a 32-bit
// R_Key, the 64-bit swap (or add) data and the 64-bit compare data.
// Methods require len(a) >= AtomicETHLen.
type AtomicETH []byte

// VA returns the remote virtual address of the 8-byte target.
func (a AtomicETH) VA() uint64 { return binary.BigEndian.Uint64(a[0:]) }

// RKey returns the remote key.
func (a AtomicETH) RKey() uint32 { return binary.BigEndian.Uint32(a[8:]) }

// SwapAdd returns the swap value (COMPARE_SWAP) or the addend (FETCH_ADD).
func (a AtomicETH) SwapAdd() uint64 { return binary.BigEndian.Uint64(a[12:]) }

// Compare returns the compare value (used only by COMPARE_SWAP).
func (a AtomicETH) Compare() uint64 { return binary.BigEndian.Uint64(a[20:]) }

// Encode writes all fields of the AtomicETH.
func (a AtomicETH) Encode(va uint64, rkey uint32, swapAdd, compare uint64) {
	_ = a[AtomicETHLen-1]
	binary.BigEndian.PutUint64(a[0:], va)
	binary.BigEndian.PutUint32(a[8:], rkey)
	binary.BigEndian.PutUint64(a[12:], swapAdd)
	binary.BigEndian.PutUint64(a[20:], compare)
}
