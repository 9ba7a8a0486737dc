package wire

import "testing"

func TestSACK(t *testing.T) {
	b := make([]byte, SACKLen(40))
	if len(b) != 8 {
		t.Fatalf("SACKLen(40) = %d, want 8", len(b))
	}
	s := SACK(b)
	for _, i := range []int{0, 7, 8, 39, 63} {
		s.Set(i)
	}
	for i := -1; i < 70; i++ {
		want := i == 0 || i == 7 || i == 8 || i == 39 || i == 63
		if s.Has(i) != want {
			t.Errorf("Has(%d) = %v, want %v", i, s.Has(i), want)
		}
	}
	if b[0] != 0x81 || b[1] != 0x01 || b[4] != 0x80 || b[7] != 0x80 {
		t.Errorf("bitmap % x: bit i must be bit i%%8 of byte i/8", b)
	}
	if SACKLen(1) != 4 || SACKLen(0) != 0 || SACKLen(5000) != MaxSACKBytes {
		t.Errorf("SACKLen(1, 0, 5000) = %d %d %d", SACKLen(1), SACKLen(0), SACKLen(5000))
	}
	long := SACK(make([]byte, 2*MaxSACKBytes))
	long[MaxSACKBytes] = 1
	if long.Bits() != 8*MaxSACKBytes || long.Has(8*MaxSACKBytes) {
		t.Error("a bitmap longer than MaxSACKBytes must be read only up to MaxSACKBytes")
	}
}

func TestSACKInfo(t *testing.T) {
	b := make([]byte, SACKHeaderLen+4)
	info := SACKInfo(b)
	info.SetNewest(0xabcdef)
	info.Bitmap().Set(3)
	if p, ok := info.Newest(); !ok || p != 0xabcdef {
		t.Errorf("Newest = %#x %v", p, ok)
	}
	if !info.Bitmap().Has(3) || info.Bitmap().Has(2) || b[4] != 8 {
		t.Errorf("bitmap after the header: % x", b)
	}
	if _, ok := SACKInfo(b[:3]).Newest(); ok || SACKInfo(b[:3]).Bitmap().Bits() != 0 {
		t.Error("a payload shorter than the header must read as empty")
	}
}
