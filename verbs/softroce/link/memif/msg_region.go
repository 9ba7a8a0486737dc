//go:build linux

package memif

import "encoding/binary"

// AddRegion is a view of an ADD_REGION body, by which the client hands the
// server a shared memory region (the file descriptor travels alongside, as
// SCM_RIGHTS):
//
//	bytes 0-1  region index
//	bytes 2-9  region size in bytes
//
// Methods require len(a) >= AddRegionLen.
type AddRegion []byte

// AddRegionLen is the length of an ADD_REGION body.
const AddRegionLen = 10

// Index returns the region index.
func (a AddRegion) Index() uint16 { return binary.LittleEndian.Uint16(a[0:]) }

// Size returns the region size.
func (a AddRegion) Size() uint64 { return binary.LittleEndian.Uint64(a[2:]) }

// Encode writes both fields.
func (a AddRegion) Encode(index uint16, size uint64) {
	_ = a[AddRegionLen-1]
	binary.LittleEndian.PutUint16(a[0:], index)
	binary.LittleEndian.PutUint64(a[2:], size)
}
