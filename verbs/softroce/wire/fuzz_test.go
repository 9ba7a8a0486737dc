package wire

import (
	"testing"
	"unsafe"
)

// within reports whether v (if non-nil) lies inside b.
func within(v, b []byte) bool {
	if v == nil {
		return true
	}
	if len(b) == 0 {
		return false
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	vs := uintptr(unsafe.Pointer(unsafe.SliceData(v)))
	if len(v) == 0 {
		return vs >= start && vs <= start+uintptr(len(b))
	}
	return vs >= start && vs+uintptr(cap(v)) <= start+uintptr(len(b))
}

func FuzzParse(f *testing.F) {
	frames, names := loadVectors(f)
	for _, name := range names {
		fr := frames[name]
		if len(fr) < ethLen+ipUDPLen+BTHLen+ICRCLen {
			f.Fatalf("%s: short frame", name)
		}
		f.Add(fr[ethLen+ipUDPLen : len(fr)-ICRCLen])
	}
	for i := range 256 {
		if op := Opcode(i); op.Valid() {
			f.Add(mkPacket(op, 0, 0))
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := Parse(b)
		if err != nil {
			if p.BTH != nil || p.Payload != nil {
				t.Fatalf("views returned with error %v", err)
			}
			return
		}
		views := []struct {
			name string
			v    []byte
			n    int
		}{
			{"BTH", p.BTH, BTHLen}, {"RETH", p.RETH, RETHLen}, {"AETH", p.AETH, AETHLen},
			{"ImmDt", p.Imm, ImmDtLen}, {"IETH", p.IETH, IETHLen}, {"AtomicETH", p.AtomicETH, AtomicETHLen},
			{"AtomicAckETH", p.AtomicAckETH, AtomicAckETHLen}, {"Payload", p.Payload, -1},
		}
		for _, v := range views {
			if !within(v.v, b) {
				t.Fatalf("%s view outside input", v.name)
			}
			if v.v != nil && v.n >= 0 && len(v.v) != v.n {
				t.Fatalf("%s view has %d bytes, want %d", v.name, len(v.v), v.n)
			}
		}
		op := p.BTH.Opcode()
		if !op.Valid() || p.BTH.TVer() != 0 {
			t.Fatalf("accepted opcode %v tver %d", op, p.BTH.TVer())
		}
		hl := op.HeaderLen()
		if got := len(p.Payload) + p.BTH.PadCount() + hl; got != len(b) {
			t.Fatalf("payload %d + pad %d + headers %d = %d, input %d", len(p.Payload), p.BTH.PadCount(), hl, got, len(b))
		}
		if (len(b)-hl)%4 != 0 {
			t.Fatalf("accepted unaligned payload+pad %d", len(b)-hl)
		}
		if !op.Flags().Has(FlagPayload) && p.Payload != nil {
			t.Fatalf("payload on %v", op)
		}
		// Accessors on every present view must not panic.
		_ = p.BTH.Fields()
		if p.RETH != nil {
			_ = p.RETH.VA() + uint64(p.RETH.RKey()+p.RETH.DMALen())
		}
		if p.AETH != nil {
			_ = p.AETH.Syndrome().String() + p.AETH.Syndrome().Kind().String()
			_ = p.AETH.MSN()
		}
		if p.Imm != nil {
			_ = p.Imm.Imm()
		}
		if p.IETH != nil {
			_ = p.IETH.RKey()
		}
		if p.AtomicETH != nil {
			_ = p.AtomicETH.VA() + p.AtomicETH.SwapAdd() + p.AtomicETH.Compare() + uint64(p.AtomicETH.RKey())
		}
		if p.AtomicAckETH != nil {
			_ = p.AtomicAckETH.OrigData()
		}
		_ = op.String()
	})
}
