//go:build linux

package memif

import "encoding/binary"

// Desc is a view of a 16-byte buffer descriptor in a ring:
//
//	bytes 0-1   flags (DescNext)
//	bytes 2-3   region index of the buffer
//	bytes 4-7   length of the data (or, offered to a sender, of the buffer)
//	bytes 8-11  offset of the buffer in its region
//	bytes 12-15 metadata
//
// Methods require len(d) >= DescLen. Descriptors in shared memory can
// change under the reader: copy one out (see Ring.LoadDesc) before
// checking and using its fields.
type Desc []byte

// DescLen is the size of a descriptor.
const DescLen = 16

// DescNext flags a descriptor whose frame continues in the next slot.
const DescNext = 1

// Flags returns the flags.
func (d Desc) Flags() uint16 { return binary.LittleEndian.Uint16(d[0:]) }

// Region returns the region index of the buffer.
func (d Desc) Region() uint16 { return binary.LittleEndian.Uint16(d[2:]) }

// Length returns the length field.
func (d Desc) Length() uint32 { return binary.LittleEndian.Uint32(d[4:]) }

// Offset returns the buffer's offset in its region.
func (d Desc) Offset() uint32 { return binary.LittleEndian.Uint32(d[8:]) }

// Metadata returns the metadata word.
func (d Desc) Metadata() uint32 { return binary.LittleEndian.Uint32(d[12:]) }

// Encode writes all fields.
func (d Desc) Encode(flags, region uint16, length, offset, metadata uint32) {
	_ = d[DescLen-1]
	binary.LittleEndian.PutUint16(d[0:], flags)
	binary.LittleEndian.PutUint16(d[2:], region)
	binary.LittleEndian.PutUint32(d[4:], length)
	binary.LittleEndian.PutUint32(d[8:], offset)
	binary.LittleEndian.PutUint32(d[12:], metadata)
}

// SetFlagsLength writes the flags and length fields only, as a sender
// filling a buffer offered by the receiver does.
func (d Desc) SetFlagsLength(flags uint16, length uint32) {
	binary.LittleEndian.PutUint16(d[0:], flags)
	binary.LittleEndian.PutUint32(d[4:], length)
}

// SetFlags writes the flags field only.
func (d Desc) SetFlags(flags uint16) { binary.LittleEndian.PutUint16(d[0:], flags) }
