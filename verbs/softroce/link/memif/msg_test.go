//go:build linux

package memif

import (
	"bytes"
	"strings"
	"testing"
)

func TestMsgLayout(t *testing.T) {
	// Offsets from DPDK's memif.h packed structs, checked byte by byte.
	m := make(Msg, MsgLen)
	m.Reset(MsgHello)
	m.Hello().Encode(&HelloFields{Name: "dpdk", MinVersion: 0x0200, MaxVersion: 0x0201, MaxRegion: 0x0304,
		MaxS2CRing: 0x0506, MaxC2SRing: 0x0708, MaxLog2RingSize: 14})
	want := append([]byte{2, 0, 'd', 'p', 'd', 'k'}, make([]byte, 28)...)
	want = append(want, 0x00, 0x02, 0x01, 0x02, 0x04, 0x03, 0x06, 0x05, 0x08, 0x07, 14)
	if !bytes.Equal(m[:len(want)], want) || !allZero(m[len(want):]) {
		t.Fatalf("HELLO\n got % x\nwant % x", []byte(m[:48]), want)
	}

	m.Reset(MsgInit)
	m.Init().Encode(&InitFields{Version: Version, ID: 0x11223344, Mode: ModeEthernet, Secret: "s3", Name: "n"})
	if m[2] != 0 || m[3] != 2 || m[4] != 0x44 || m[7] != 0x11 || m[8] != 0 || m[9] != 's' || m[10] != '3' ||
		m[2+31] != 'n' {
		t.Fatalf("INIT % x", []byte(m[:40]))
	}

	m.Reset(MsgAddRegion)
	m.AddRegion().Encode(1, 0x0102030405060708)
	if !bytes.Equal(m[:12], []byte{4, 0, 1, 0, 8, 7, 6, 5, 4, 3, 2, 1}) {
		t.Fatalf("ADD_REGION % x", []byte(m[:12]))
	}

	m.Reset(MsgAddRing)
	m.AddRing().Encode(&AddRingFields{Flags: AddRingC2S, Index: 2, Region: 3, Offset: 0x04050607, Log2Size: 10, PrivateHdrSize: 0x0809})
	if !bytes.Equal(m[:15], []byte{5, 0, 1, 0, 2, 0, 3, 0, 7, 6, 5, 4, 10, 9, 8}) {
		t.Fatalf("ADD_RING % x", []byte(m[:15]))
	}

	m.Reset(MsgDisconnect)
	m.Disconnect().Encode(7, "bye")
	if !bytes.Equal(m[:9], []byte{8, 0, 7, 0, 0, 0, 'b', 'y', 'e'}) {
		t.Fatalf("DISCONNECT % x", []byte(m[:9]))
	}
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

func TestMsgRoundTrip(t *testing.T) {
	m := make(Msg, MsgLen)
	long := strings.Repeat("x", 200)
	hf := HelloFields{Name: long, MinVersion: 1, MaxVersion: 2, MaxRegion: 3, MaxS2CRing: 4, MaxC2SRing: 5, MaxLog2RingSize: 6}
	m.Reset(MsgHello)
	m.Hello().Encode(&hf)
	hf.Name = long[:NameLen-1]
	if got := m.Hello().Fields(); got != hf || m.Type() != MsgHello {
		t.Fatalf("HELLO %+v", got)
	}
	inf := InitFields{Version: Version, ID: 9, Mode: ModeIP, Secret: long, Name: "client"}
	m.Reset(MsgInit)
	m.Init().Encode(&inf)
	inf.Secret = long[:SecretLen-1]
	if got := m.Init().Fields(); got != inf {
		t.Fatalf("INIT %+v", got)
	}
	rf := AddRingFields{Flags: 1, Index: 2, Region: 3, Offset: 4, Log2Size: 5, PrivateHdrSize: 6}
	m.Reset(MsgAddRing)
	m.AddRing().Encode(&rf)
	if got := m.AddRing().Fields(); got != rf {
		t.Fatalf("ADD_RING %+v", got)
	}
	m.Reset(MsgConnected)
	m.Connect().Encode("if0")
	if m.Connect().IfName() != "if0" || m.Type() != MsgConnected {
		t.Fatal("CONNECTED")
	}
	m.Reset(MsgDisconnect)
	m.Disconnect().Encode(3, long)
	if d := m.Disconnect(); d.Code() != 3 || d.Reason() != long[:ReasonLen-1] {
		t.Fatal("DISCONNECT")
	}
	if MsgType(99).String() != "UNKNOWN(99)" || MsgAddRing.String() != "ADD_RING" {
		t.Fatal("MsgType.String")
	}
}

func TestDescAndRingLayout(t *testing.T) {
	d := make(Desc, DescLen)
	d.Encode(DescNext, 0x0203, 0x04050607, 0x08090a0b, 0x0c0d0e0f)
	if !bytes.Equal(d, []byte{1, 0, 3, 2, 7, 6, 5, 4, 0xb, 0xa, 9, 8, 0xf, 0xe, 0xd, 0xc}) {
		t.Fatalf("desc % x", []byte(d))
	}
	d.SetFlagsLength(0, 5)
	if d.Flags() != 0 || d.Length() != 5 || d.Region() != 0x0203 || d.Offset() != 0x08090a0b || d.Metadata() != 0x0c0d0e0f {
		t.Fatal("desc fields")
	}
	r := make(Ring, RingLen(2))
	if len(r) != 128+4*16 {
		t.Fatalf("RingLen(2) = %d", len(r))
	}
	r.Init()
	r.SetFlags(RingMaskInt)
	r.StoreHead(0x1234)
	r.StoreTail(0xabcd)
	if !bytes.Equal(r[:8], []byte{0x20, 0x1f, 0xe3, 0x03, 1, 0, 0x34, 0x12}) || r[64] != 0xcd || r[65] != 0xab {
		t.Fatalf("ring header % x / % x", []byte(r[:8]), []byte(r[64:66]))
	}
	if r.Cookie() != Cookie || r.Flags() != RingMaskInt || r.Head() != 0x1234 || r.Tail() != 0xabcd {
		t.Fatal("ring accessors")
	}
	r.SetFlags(0)
	if r.Head() != 0x1234 || r.Flags() != 0 {
		t.Fatal("SetFlags touched the head")
	}
	r.Desc(3).Encode(0, 1, 2, 3, 4)
	if got := r.LoadDesc(3); Desc(got[:]).Offset() != 3 || r[128+3*16+8] != 3 {
		t.Fatal("descriptor slot 3")
	}
}

// FuzzMsg decodes arbitrary control messages through every body view.
func FuzzMsg(f *testing.F) {
	m := make(Msg, MsgLen)
	for _, typ := range []MsgType{MsgHello, MsgInit, MsgAddRegion, MsgAddRing, MsgConnect, MsgDisconnect} {
		m.Reset(typ)
		f.Add([]byte(m))
	}
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		if len(b) < MsgLen {
			if _, err := parseMsg(b, len(b), 0); err == nil {
				t.Fatal("short message accepted")
			}
			return
		}
		m := Msg(b)
		_ = m.Type().String()
		_ = m.Hello().Fields()
		_ = m.Init().Fields()
		_, _ = m.AddRegion().Index(), m.AddRegion().Size()
		_ = m.AddRing().Fields()
		_ = m.Connect().IfName()
		_, _ = m.Disconnect().Code(), m.Disconnect().Reason()
		// Re-encoding what was decoded is stable.
		h := m.Hello().Fields()
		m2 := make(Msg, MsgLen)
		m2.Hello().Encode(&h)
		h.Name = h.Name[:min(len(h.Name), NameLen-1)] // a full field loses its last byte to the NUL
		if m2.Hello().Fields() != h {
			t.Fatal("HELLO round trip")
		}
		_, _ = parseMsg(b, len(b), 0)
	})
}

// FuzzDesc checks descriptors against a region table, as the data path
// does: whatever the bytes, an accepted buffer lies inside its region.
func FuzzDesc(f *testing.F) {
	f.Add(make([]byte, DescLen), uint32(4096))
	d := make(Desc, DescLen)
	d.Encode(DescNext, 0, 100, 4000, 0)
	f.Add([]byte(d), uint32(4096))
	f.Fuzz(func(t *testing.T, b []byte, size uint32) {
		if len(b) < DescLen {
			return
		}
		size %= 1 << 20
		regs := []region{{mem: make([]byte, size)}}
		var raw [DescLen]byte
		copy(raw[:], b)
		buf, err := descBuffer(regs, &raw)
		if err != nil {
			return
		}
		if !inside(buf, regs[0].mem) {
			t.Fatalf("buffer outside region: desc % x, region %d", raw, size)
		}
	})
}
