package wire

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"unsafe"
)

func TestPadFor(t *testing.T) {
	tests := []struct{ n, want int }{
		{0, 0}, {1, 3}, {2, 2}, {3, 1}, {4, 0}, {5, 3}, {13, 3}, {100, 0}, {255, 1}, {4096, 0}, {4097, 3},
	}
	for _, tc := range tests {
		if got := PadFor(tc.n); got != tc.want {
			t.Errorf("PadFor(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
}

// mkPacket returns a packet of opcode op with n bytes after the headers and
// the given pad count and BTH byte 1 overrides.
func mkPacket(op Opcode, n int, pad uint8) []byte {
	hl := op.HeaderLen()
	if hl == 0 {
		hl = BTHLen
	}
	b := make([]byte, hl+n)
	for i := BTHLen; i < len(b); i++ {
		b[i] = byte(i)
	}
	BTH(b).Encode(&BTHFields{Opcode: op, PadCount: pad, PKey: DefaultPKey, DestQP: 0x12, PSN: 7})
	return b
}

func TestParseErrors(t *testing.T) {
	withTVer := func(b []byte, v uint8) []byte { b[1] = b[1]&0xf0 | v; return b }
	tests := []struct {
		name string
		b    []byte
		err  error
	}{
		{"nil", nil, ErrShort},
		{"empty", []byte{}, ErrShort},
		{"11 bytes", mkPacket(RCSendOnly, 0, 0)[:11], ErrShort},
		{"write first without RETH", mkPacket(RCWriteFirst, 0, 0)[:BTHLen+RETHLen-1], ErrShort},
		{"ack without AETH", mkPacket(RCAcknowledge, 0, 0)[:BTHLen], ErrShort},
		{"atomic ack short", mkPacket(RCAtomicAcknowledge, 0, 0)[:BTHLen+AETHLen+4], ErrShort},
		{"cmp swap short", mkPacket(RCCompareSwap, 0, 0)[:39], ErrShort},
		{"send only imm short", mkPacket(RCSendOnlyImm, 0, 0)[:15], ErrShort},
		{"opcode 0x15", mkPacket(0x15, 0, 0), ErrOpcode},
		{"opcode 0x18", mkPacket(0x18, 4, 0), ErrOpcode},
		{"opcode 0x1f", mkPacket(0x1f, 0, 0), ErrOpcode},
		{"UC send only", mkPacket(0x24, 0, 0), ErrOpcode},
		{"UD send only", mkPacket(0x64, 8, 0), ErrOpcode},
		{"CNP", mkPacket(0x81, 16, 0), ErrOpcode},
		{"opcode 0xff", mkPacket(0xff, 0, 0), ErrOpcode},
		{"tver 1", withTVer(mkPacket(RCSendOnly, 4, 0), 1), ErrVersion},
		{"tver 15", withTVer(mkPacket(RCAcknowledge, 0, 0), 15), ErrVersion},
		{"ack trailing bytes", mkPacket(RCAcknowledge, 4, 0), ErrPayload},
		{"ack one trailing byte", mkPacket(RCAcknowledge, 1, 0), ErrPayload},
		{"read request trailing", mkPacket(RCReadRequest, 8, 0), ErrPayload},
		{"atomic trailing", mkPacket(RCFetchAdd, 4, 0), ErrPayload},
		{"atomic ack trailing", mkPacket(RCAtomicAcknowledge, 4, 0), ErrPayload},
		{"ack with pad count", mkPacket(RCAcknowledge, 0, 1), ErrPad},
		{"send unaligned 13", mkPacket(RCSendOnly, 13, 3), ErrPad},
		{"send unaligned 1", mkPacket(RCSendMiddle, 1, 0), ErrPad},
		{"write unaligned", mkPacket(RCWriteOnlyImm, 6, 2), ErrPad},
		{"empty payload with pad", mkPacket(RCSendOnly, 0, 3), ErrPad},
		{"read resp empty with pad", mkPacket(RCReadResponseOnly, 0, 2), ErrPad},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := Parse(tc.b)
			if !errors.Is(err, tc.err) {
				t.Fatalf("Parse = %v, want %v", err, tc.err)
			}
			if !strings.HasPrefix(err.Error(), "wire: ") {
				t.Errorf("error %q lacks the \"wire: \" prefix", err)
			}
			if p.BTH != nil || p.Payload != nil {
				t.Errorf("failed Parse returned views")
			}
		})
	}
}

func sameStart(v, b []byte, off int) bool {
	return len(v) > 0 && unsafe.SliceData(v) == &b[off]
}

func TestParseAllOpcodes(t *testing.T) {
	// Offsets of the extension headers; -1 = absent.
	type offs struct{ reth, atomic, aeth, aack, imm, ieth int }
	none := offs{-1, -1, -1, -1, -1, -1}
	layout := map[Opcode]offs{
		RCSendLastImm:       {-1, -1, -1, -1, 12, -1},
		RCSendOnlyImm:       {-1, -1, -1, -1, 12, -1},
		RCWriteFirst:        {12, -1, -1, -1, -1, -1},
		RCWriteLastImm:      {-1, -1, -1, -1, 12, -1},
		RCWriteOnly:         {12, -1, -1, -1, -1, -1},
		RCWriteOnlyImm:      {12, -1, -1, -1, 28, -1},
		RCReadRequest:       {12, -1, -1, -1, -1, -1},
		RCReadResponseFirst: {-1, -1, 12, -1, -1, -1},
		RCReadResponseLast:  {-1, -1, 12, -1, -1, -1},
		RCReadResponseOnly:  {-1, -1, 12, -1, -1, -1},
		RCAcknowledge:       {-1, -1, 12, -1, -1, -1},
		RCAtomicAcknowledge: {-1, -1, 12, 16, -1, -1},
		RCCompareSwap:       {-1, 12, -1, -1, -1, -1},
		RCFetchAdd:          {-1, 12, -1, -1, -1, -1},
		RCSendLastInv:       {-1, -1, -1, -1, -1, 12},
		RCSendOnlyInv:       {-1, -1, -1, -1, -1, 12},
		RCSelectiveNAK:      {-1, -1, 12, -1, -1, -1},
	}
	check := func(t *testing.T, name string, v, b []byte, off, n int) {
		t.Helper()
		if off < 0 {
			if v != nil {
				t.Errorf("%s present, want nil", name)
			}
			return
		}
		if len(v) != n || cap(v) != n || !sameStart(v, b, off) {
			t.Errorf("%s: len %d cap %d, want %d bytes at offset %d", name, len(v), cap(v), n, off)
		}
	}
	for i := range 256 {
		op := Opcode(i)
		if !op.Valid() {
			continue
		}
		lo, ok := layout[op]
		if !ok {
			lo = none
		}
		sizes := []int{0}
		if op.Flags().Has(FlagPayload) {
			sizes = []int{0, 1, 2, 3, 4, 13, 256, 4093}
		}
		for _, n := range sizes {
			pad := PadFor(n)
			b := mkPacket(op, n+pad, uint8(pad))
			p, err := Parse(b)
			if err != nil {
				t.Errorf("%v payload %d: %v", op, n, err)
				continue
			}
			t.Run(op.String(), func(t *testing.T) {
				check(t, "BTH", p.BTH, b, 0, BTHLen)
				check(t, "RETH", p.RETH, b, lo.reth, RETHLen)
				check(t, "AtomicETH", p.AtomicETH, b, lo.atomic, AtomicETHLen)
				check(t, "AETH", p.AETH, b, lo.aeth, AETHLen)
				check(t, "AtomicAckETH", p.AtomicAckETH, b, lo.aack, AtomicAckETHLen)
				check(t, "ImmDt", p.Imm, b, lo.imm, ImmDtLen)
				check(t, "IETH", p.IETH, b, lo.ieth, IETHLen)
				if !op.Flags().Has(FlagPayload) {
					if p.Payload != nil {
						t.Errorf("payload %x on %v", p.Payload, op)
					}
					return
				}
				hl := op.HeaderLen()
				if p.Payload == nil || len(p.Payload) != n || cap(p.Payload) != n {
					t.Errorf("payload len %d cap %d (nil %v), want %d", len(p.Payload), cap(p.Payload), p.Payload == nil, n)
				} else if n > 0 && !sameStart(p.Payload, b, hl) {
					t.Errorf("payload does not start at %d", hl)
				}
				if len(p.Payload)+p.BTH.PadCount()+hl != len(b) {
					t.Errorf("lengths do not add up")
				}
			})
		}
	}
}

func TestParseKeepsBTHFields(t *testing.T) {
	f := BTHFields{Opcode: RCWriteMiddle, Solicited: true, MigReq: true, PadCount: 1, PKey: 0x7fff,
		FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff}
	b := make([]byte, BTHLen+8)
	BTH(b).Encode(&f)
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.BTH.Fields(); got != f {
		t.Errorf("Fields = %+v, want %+v", got, f)
	}
	if len(p.Payload) != 7 {
		t.Errorf("payload %d bytes, want 7", len(p.Payload))
	}
}

// Sinks keep the compiler from optimizing the measured calls away.
var (
	sinkPacket Packet
	sinkErr    error
	sinkU32    uint32
)

func TestNoAllocs(t *testing.T) {
	pkt := make([]byte, BTHLen+RETHLen+ImmDtLen+4096)
	BTH(pkt).Encode(&BTHFields{Opcode: RCWriteOnlyImm, PKey: DefaultPKey, DestQP: 0x12, PSN: 5})
	ph4 := &PseudoHeader{Src: netip.MustParseAddrPort("192.0.2.1:49153"), Dst: netip.MustParseAddrPort("192.0.2.2:4791"), IPID: 9}
	ph6 := &PseudoHeader{Src: netip.MustParseAddrPort("[2001:db8::1]:49153"), Dst: netip.MustParseAddrPort("[2001:db8::2]:4791")}
	hdr4 := buildIPUDP(ph4.Src, ph4.Dst, 9, 0, 64, 0, 0, len(pkt))
	hdr6 := buildIPUDP(ph6.Src, ph6.Dst, 0, 0, 64, 0, 0, len(pkt))
	hdrs := make([]byte, 64)
	bth := BTHFields{Opcode: RCAtomicAcknowledge, PKey: DefaultPKey, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff}
	tests := []struct {
		name string
		f    func()
	}{
		{"Parse", func() { sinkPacket, sinkErr = Parse(pkt) }},
		{"ParseError", func() { sinkPacket, sinkErr = Parse(pkt[:5]) }},
		{"ComputeICRC/v4", func() { sinkU32 = ComputeICRC(ph4, pkt) }},
		{"ComputeICRC/v6", func() { sinkU32 = ComputeICRC(ph6, pkt) }},
		{"ComputeICRCFromHeaders/v4", func() { sinkU32 = ComputeICRCFromHeaders(hdr4, pkt) }},
		{"ComputeICRCFromHeaders/v6", func() { sinkU32 = ComputeICRCFromHeaders(hdr6, pkt) }},
		{"PutICRC", func() { PutICRC(hdrs, sinkU32); sinkU32 = ICRCOf(hdrs) }},
		{"Encoders", func() {
			BTH(hdrs).Encode(&bth)
			BTH(hdrs).SetPSN(1)
			BTH(hdrs).SetAckReq(false)
			BTH(hdrs).SetDestQP(2)
			RETH(hdrs[12:]).Encode(1, 2, 3)
			AETH(hdrs[12:]).Encode(NAKSyndrome(NAKRemoteAccess), 4)
			AtomicAckETH(hdrs[16:]).Set(5)
			AtomicETH(hdrs[12:]).Encode(6, 7, 8, 9)
			ImmDt(hdrs[40:]).Set(10)
			IETH(hdrs[44:]).Set(11)
		}},
		{"Accessors", func() {
			b := BTH(hdrs)
			sinkU32 = b.PSN() + b.DestQP() + uint32(b.PKey()) + uint32(b.Opcode().HeaderLen()) + uint32(b.Opcode().Flags())
			sinkU32 += RETH(hdrs[12:]).RKey() + AETH(hdrs[12:]).MSN() + uint32(AETH(hdrs[12:]).Syndrome().Kind())
		}},
	}
	for _, tc := range tests {
		if n := testing.AllocsPerRun(100, tc.f); n != 0 {
			t.Errorf("%s: %v allocations per run, want 0", tc.name, n)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	pkt := make([]byte, BTHLen+RETHLen+ImmDtLen+4096)
	BTH(pkt).Encode(&BTHFields{Opcode: RCWriteOnlyImm, PKey: DefaultPKey, DestQP: 0x12, PSN: 5})
	b.ReportAllocs()
	for b.Loop() {
		sinkPacket, sinkErr = Parse(pkt)
	}
	if sinkErr != nil {
		b.Fatal(sinkErr)
	}
}

func BenchmarkComputeICRC(b *testing.B) {
	pkt := make([]byte, BTHLen+4096)
	BTH(pkt).Encode(&BTHFields{Opcode: RCSendMiddle, PKey: DefaultPKey, DestQP: 0x12, PSN: 5})
	for i := BTHLen; i < len(pkt); i++ {
		pkt[i] = byte(i)
	}
	ph := &PseudoHeader{Src: netip.MustParseAddrPort("192.0.2.1:49153"), Dst: netip.MustParseAddrPort("192.0.2.2:4791")}
	b.SetBytes(int64(len(pkt)))
	b.ReportAllocs()
	for b.Loop() {
		sinkU32 = ComputeICRC(ph, pkt)
	}
}
