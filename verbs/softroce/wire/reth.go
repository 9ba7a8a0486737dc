package wire

import "encoding/binary"

// RETH is a view of the 16-byte RDMA Extended Transport Header: a 64-bit
// virtual address, a 32-bit R_Key and a 32-bit DMA length. It is carried by
// RDMA WRITE first/only packets and RDMA READ requests.
// Methods require len(r) >= RETHLen.
type RETH []byte

// VA returns the remote virtual address.
func (r RETH) VA() uint64 { return binary.BigEndian.Uint64(r[0:]) }

// RKey returns the remote key.
func (r RETH) RKey() uint32 { return binary.BigEndian.Uint32(r[8:]) }

// DMALen returns the length in bytes of the whole RDMA operation.
func (r RETH) DMALen() uint32 { return binary.BigEndian.Uint32(r[12:]) }

// Encode writes all fields of the RETH.
func (r RETH) Encode(va uint64, rkey, dmaLen uint32) {
	_ = r[RETHLen-1]
	binary.BigEndian.PutUint64(r[0:], va)
	binary.BigEndian.PutUint32(r[8:], rkey)
	binary.BigEndian.PutUint32(r[12:], dmaLen)
}
