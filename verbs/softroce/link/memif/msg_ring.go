//go:build linux

package memif

import "encoding/binary"

// AddRing is a view of an ADD_RING body, by which the client tells the
// server where a ring lives (its interrupt eventfd travels alongside, as
// SCM_RIGHTS):
//
//	bytes 0-1   flags (AddRingC2S)
//	bytes 2-3   ring index
//	bytes 4-5   region index holding the ring
//	bytes 6-9   offset of the ring header in that region
//	byte 10     log2 of the ring size
//	bytes 11-12 private header size (0)
//
// Methods require len(a) >= AddRingLen.
type AddRing []byte

// AddRingLen is the length of an ADD_RING body.
const AddRingLen = 13

// AddRingC2S flags a client-to-server ring; without it the ring is
// server-to-client.
const AddRingC2S = 1

// AddRingFields holds the fields of an ADD_RING.
type AddRingFields struct {
	Flags          uint16
	Index          uint16
	Region         uint16
	Offset         uint32
	Log2Size       uint8
	PrivateHdrSize uint16
}

// Flags returns the flags.
func (a AddRing) Flags() uint16 { return binary.LittleEndian.Uint16(a[0:]) }

// Index returns the ring index.
func (a AddRing) Index() uint16 { return binary.LittleEndian.Uint16(a[2:]) }

// Region returns the index of the region holding the ring.
func (a AddRing) Region() uint16 { return binary.LittleEndian.Uint16(a[4:]) }

// Offset returns the offset of the ring header in its region.
func (a AddRing) Offset() uint32 { return binary.LittleEndian.Uint32(a[6:]) }

// Log2Size returns log2 of the number of descriptors.
func (a AddRing) Log2Size() uint8 { return a[10] }

// PrivateHdrSize returns the size of the private header.
func (a AddRing) PrivateHdrSize() uint16 { return binary.LittleEndian.Uint16(a[11:]) }

// Fields returns all fields.
func (a AddRing) Fields() AddRingFields {
	return AddRingFields{a.Flags(), a.Index(), a.Region(), a.Offset(), a.Log2Size(), a.PrivateHdrSize()}
}

// Encode writes all fields.
func (a AddRing) Encode(f *AddRingFields) {
	_ = a[AddRingLen-1]
	binary.LittleEndian.PutUint16(a[0:], f.Flags)
	binary.LittleEndian.PutUint16(a[2:], f.Index)
	binary.LittleEndian.PutUint16(a[4:], f.Region)
	binary.LittleEndian.PutUint32(a[6:], f.Offset)
	a[10] = f.Log2Size
	binary.LittleEndian.PutUint16(a[11:], f.PrivateHdrSize)
}
