package wire

import (
	"fmt"
	"testing"
)

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

// TestSACKWide: a reader that negotiated wide SACK reads up to its own
// limit, MaxWideSACKBytes at most, where an older reader stops at
// MaxSACKBytes; NextSet finds exactly the bits Has reports.
func TestSACKWide(t *testing.T) {
	b := make([]byte, MaxWideSACKBytes+8)
	s := SACK(b)
	set := []int{0, 9, 63, 64, 1023, 1024, 2047, 4095}
	for _, i := range set {
		s.Set(i)
	}
	s.Set(8 * MaxWideSACKBytes) // past any reader's limit
	if s.Bits() != 8*MaxSACKBytes || s.BitsWithin(MaxWideSACKBytes) != 8*MaxWideSACKBytes || s.BitsWithin(256) != 2048 {
		t.Fatalf("Bits %d, BitsWithin(512) %d, BitsWithin(256) %d", s.Bits(), s.BitsWithin(MaxWideSACKBytes), s.BitsWithin(256))
	}
	if SACK(b[:12]).BitsWithin(MaxWideSACKBytes) != 96 || SACK(nil).BitsWithin(-1) != 0 {
		t.Fatal("BitsWithin must not exceed the bitmap, nor go below 0")
	}
	for _, lim := range []int{MaxSACKBytes, 256, MaxWideSACKBytes} {
		n := s.BitsWithin(lim)
		var got []int
		for i := s.NextSet(0, n); i >= 0; i = s.NextSet(i+1, n) {
			got = append(got, i)
		}
		var want []int
		for _, i := range set {
			if i < n {
				want = append(want, i)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("within %d bytes: NextSet finds %v, want %v", lim, got, want)
		}
	}
	if s.NextSet(-5, 1) != 0 || s.NextSet(10, 63) != -1 || s.NextSet(0, 1<<20) != 0 || SACK(nil).NextSet(0, 100) != -1 {
		t.Error("NextSet out of range")
	}
	if SACKLenWithin(4095, MaxWideSACKBytes) != 512 || SACKLenWithin(5000, MaxWideSACKBytes) != 512 ||
		SACKLenWithin(1025, 256) != 132 || SACKLenWithin(-3, 512) != 0 {
		t.Errorf("SACKLenWithin: %d %d %d %d", SACKLenWithin(4095, MaxWideSACKBytes), SACKLenWithin(5000, MaxWideSACKBytes),
			SACKLenWithin(1025, 256), SACKLenWithin(-3, 512))
	}
}

// FuzzSACK reads arbitrary selective-NAK payloads as a narrow and as a
// wide reader: nothing panics, the bits read stay within each reader's
// limit, and NextSet agrees with the bytes.
func FuzzSACK(f *testing.F) {
	for _, n := range []int{0, 3, 4, 8, SACKHeaderLen + MaxSACKBytes, SACKHeaderLen + 256,
		SACKHeaderLen + MaxWideSACKBytes, SACKHeaderLen + MaxWideSACKBytes + 4, 1020} {
		p := make([]byte, n)
		for i := SACKHeaderLen; i < n; i += 37 {
			p[i] = byte(i)
		}
		f.Add(p, uint16(MaxWideSACKBytes))
		f.Add(p, uint16(MaxSACKBytes))
	}
	f.Fuzz(func(t *testing.T, payload []byte, limit uint16) {
		info := SACKInfo(payload)
		_, _ = info.Newest()
		s := info.Bitmap()
		lim := int(limit) % (MaxWideSACKBytes + 1)
		n := s.BitsWithin(lim)
		if n > 8*lim || n > 8*len(s) || s.Bits() > 8*MaxSACKBytes {
			t.Fatalf("%d bits within %d bytes of a %d-byte bitmap (narrow %d)", n, lim, len(s), s.Bits())
		}
		count := 0
		for i := s.NextSet(0, n); i >= 0; i = s.NextSet(i+1, n) {
			if i >= n || s[i>>3]&(1<<(i&7)) == 0 {
				t.Fatalf("NextSet returned %d, not a set bit below %d", i, n)
			}
			count++
		}
		want := 0
		for i := range n {
			if s[i>>3]&(1<<(i&7)) != 0 {
				want++
			}
		}
		if count != want {
			t.Fatalf("NextSet found %d bits, the bytes hold %d", count, want)
		}
	})
}
