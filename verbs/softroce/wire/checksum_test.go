package wire

import "testing"

// refChecksum is RFC 1071's algorithm, 16 bits at a time.
func refChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

func TestChecksumMatchesReference(t *testing.T) {
	b := make([]byte, 301)
	for i := range b {
		b[i] = byte(i*31 + 0xf0)
	}
	for n := range len(b) {
		if got, want := ChecksumFold(ChecksumUpdate(0, b[:n])), refChecksum(b[:n]); got != want {
			t.Fatalf("n=%d: %#x, want %#x", n, got, want)
		}
	}
	all := make([]byte, 1<<17)
	for i := range all {
		all[i] = 0xff
	}
	if got, want := ChecksumFold(ChecksumUpdate(0, all)), refChecksum(all); got != want {
		t.Fatalf("all ones: %#x, want %#x", got, want)
	}
}
