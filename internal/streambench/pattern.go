package streambench

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
)

// Pattern is the deterministic pseudo-random byte stream of one data
// connection: the little-endian words of a PCG generator seeded with the
// measurement's seed and the connection's index. Fill and Check may be
// called with any lengths; the stream continues across calls.
type Pattern struct {
	pcg  *rand.PCG
	word [8]byte
	left int   // unused bytes at the end of word
	off  int64 // bytes produced so far
	tmp  []byte
}

// NewPattern returns the pattern of connection index under seed.
func NewPattern(seed uint64, index int) *Pattern {
	return &Pattern{pcg: rand.NewPCG(seed, 0x9e3779b97f4a7c15^uint64(index))}
}

// Offset is the number of bytes produced (or checked) so far.
func (p *Pattern) Offset() int64 { return p.off }

// Fill writes the next len(b) bytes of the stream into b.
func (p *Pattern) Fill(b []byte) {
	p.off += int64(len(b))
	for len(b) > 0 && p.left > 0 {
		b[0] = p.word[8-p.left]
		b = b[1:]
		p.left--
	}
	for len(b) >= 8 {
		binary.LittleEndian.PutUint64(b, p.pcg.Uint64())
		b = b[8:]
	}
	if len(b) > 0 {
		binary.LittleEndian.PutUint64(p.word[:], p.pcg.Uint64())
		n := copy(b, p.word[:])
		p.left = 8 - n
	}
}

// Check compares b with the next len(b) bytes of the stream. On a
// mismatch it returns the stream offset of the first differing byte, the
// byte received and the byte expected, and ok false.
func (p *Pattern) Check(b []byte) (off int64, got, want byte, ok bool) {
	const chunk = 64 << 10
	if cap(p.tmp) < min(len(b), chunk) {
		p.tmp = make([]byte, min(len(b), chunk))
	}
	for len(b) > 0 {
		n := min(len(b), chunk)
		exp := p.tmp[:n]
		base := p.off
		p.Fill(exp)
		if string(exp) != string(b[:n]) {
			for i := range n {
				if exp[i] != b[i] {
					return base + int64(i), b[i], exp[i], false
				}
			}
		}
		b = b[n:]
	}
	return p.off, 0, 0, true
}

// MismatchError reports the first byte of a data connection that did not
// match its Pattern.
type MismatchError struct {
	Conn   int   `json:"conn"`   // index of the data connection
	Offset int64 `json:"offset"` // offset in that connection's stream
	Got    byte  `json:"got"`
	Want   byte  `json:"want"`
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("verify: data connection %d: byte at offset %d is %#02x, want %#02x", e.Conn, e.Offset, e.Got, e.Want)
}
