package wire

import (
	"bytes"
	"testing"
)

func TestEthernetVectors(t *testing.T) {
	frames, names := loadVectors(t)
	for _, name := range names {
		e := Ethernet(frames[name])
		if e.EtherType() != EtherTypeIPv4 {
			t.Errorf("%s: EtherType %#x", name, e.EtherType())
		}
		out := make(Ethernet, EthernetLen)
		out.Encode(e.Dst(), e.Src(), e.EtherType())
		if !bytes.Equal(out, e[:EthernetLen]) {
			t.Errorf("%s: re-encoded %x, want %x", name, []byte(out), []byte(e[:EthernetLen]))
		}
	}
}

func TestEthernetEncode(t *testing.T) {
	b := make(Ethernet, EthernetLen)
	dst, src := MAC{1, 2, 3, 4, 5, 6}, MAC{7, 8, 9, 10, 11, 12}
	b.Encode(dst, src, EtherTypeIPv6)
	want := []byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0x86, 0xdd}
	if !bytes.Equal(b, want) {
		t.Fatalf("got %x, want %x", []byte(b), want)
	}
	if b.Dst() != dst || b.Src() != src || b.EtherType() != EtherTypeIPv6 {
		t.Fatal("accessors disagree with Encode")
	}
}

func FuzzEthernet(f *testing.F) {
	f.Add(make([]byte, EthernetLen))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < EthernetLen {
			return
		}
		e := Ethernet(b)
		out := make(Ethernet, EthernetLen)
		out.Encode(e.Dst(), e.Src(), e.EtherType())
		if !bytes.Equal(out, b[:EthernetLen]) {
			t.Fatalf("round trip %x -> %x", b[:EthernetLen], []byte(out))
		}
	})
}
