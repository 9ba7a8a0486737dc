package wire

import "encoding/binary"

// ChecksumUpdate adds b to the running 16-bit one's complement sum of the
// Internet checksum (RFC 1071) and returns the new, unfolded sum. Start
// with 0; an odd-length b is padded with a zero byte, so only the last
// piece of a checksummed area may have an odd length.
func ChecksumUpdate(sum uint32, b []byte) uint32 {
	s := uint64(sum)
	for len(b) >= 8 {
		v := binary.BigEndian.Uint64(b)
		s += v >> 48
		s += v >> 32 & 0xffff
		s += v >> 16 & 0xffff
		s += v & 0xffff
		b = b[8:]
	}
	for len(b) >= 2 {
		s += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		s += uint64(b[0]) << 8
	}
	for s>>32 != 0 {
		s = s&0xffffffff + s>>32
	}
	return uint32(s)
}

// ChecksumFold folds a sum from ChecksumUpdate to 16 bits and complements
// it, giving the value to store in a checksum field.
func ChecksumFold(sum uint32) uint16 {
	for sum>>16 != 0 {
		sum = sum&0xffff + sum>>16
	}
	return ^uint16(sum)
}
