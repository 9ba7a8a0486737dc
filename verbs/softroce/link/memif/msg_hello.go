//go:build linux

package memif

import "encoding/binary"

// Hello is a view of a HELLO body, sent by the server as soon as a client
// connects, with the limits of the server:
//
//	bytes 0-31  name (NUL-padded)
//	bytes 32-33 lowest supported version
//	bytes 34-35 highest supported version
//	bytes 36-37 highest region index
//	bytes 38-39 highest S2C ring index
//	bytes 40-41 highest C2S ring index
//	byte 42     largest log2 ring size
//
// Methods require len(h) >= HelloLen.
type Hello []byte

// HelloLen is the length of a HELLO body.
const HelloLen = 43

// HelloFields holds the fields of a HELLO.
type HelloFields struct {
	Name                   string
	MinVersion, MaxVersion uint16
	// MaxRegion, MaxS2CRing and MaxC2SRing are the highest indexes the
	// server accepts (one less than the counts).
	MaxRegion, MaxS2CRing, MaxC2SRing uint16
	MaxLog2RingSize                   uint8
}

// Name returns the server's name.
func (h Hello) Name() string { return cString(h[0:NameLen]) }

// MinVersion returns the lowest supported protocol version.
func (h Hello) MinVersion() uint16 { return binary.LittleEndian.Uint16(h[32:]) }

// MaxVersion returns the highest supported protocol version.
func (h Hello) MaxVersion() uint16 { return binary.LittleEndian.Uint16(h[34:]) }

// MaxRegion returns the highest region index the server accepts.
func (h Hello) MaxRegion() uint16 { return binary.LittleEndian.Uint16(h[36:]) }

// MaxS2CRing returns the highest server-to-client ring index.
func (h Hello) MaxS2CRing() uint16 { return binary.LittleEndian.Uint16(h[38:]) }

// MaxC2SRing returns the highest client-to-server ring index.
func (h Hello) MaxC2SRing() uint16 { return binary.LittleEndian.Uint16(h[40:]) }

// MaxLog2RingSize returns the largest ring size, as a power of two.
func (h Hello) MaxLog2RingSize() uint8 { return h[42] }

// Fields returns all fields.
func (h Hello) Fields() HelloFields {
	return HelloFields{h.Name(), h.MinVersion(), h.MaxVersion(), h.MaxRegion(), h.MaxS2CRing(), h.MaxC2SRing(), h.MaxLog2RingSize()}
}

// Encode writes all fields; the name is truncated to NameLen-1 bytes.
func (h Hello) Encode(f *HelloFields) {
	_ = h[HelloLen-1]
	putCString(h[0:NameLen], f.Name)
	binary.LittleEndian.PutUint16(h[32:], f.MinVersion)
	binary.LittleEndian.PutUint16(h[34:], f.MaxVersion)
	binary.LittleEndian.PutUint16(h[36:], f.MaxRegion)
	binary.LittleEndian.PutUint16(h[38:], f.MaxS2CRing)
	binary.LittleEndian.PutUint16(h[40:], f.MaxC2SRing)
	h[42] = f.MaxLog2RingSize
}
