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
			{"AtomicAckETH", p.AtomicAckETH, AtomicAckETHLen}, {"ECNEcho", p.ECNEcho, ECNEchoLen},
			{"DupEcho", p.DupEcho, DupEchoLen}, {"Payload", p.Payload, -1},
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
		if (p.ECNEcho != nil) != (op == RCECNEcho) {
			t.Fatalf("ECNEcho view %x on %v", []byte(p.ECNEcho), op)
		}
		if p.ECNEcho != nil {
			_ = p.ECNEcho.ECT() + p.ECNEcho.CE()
		}
		if (p.DupEcho != nil) != (op == RCDuplicateEcho) {
			t.Fatalf("DupEcho view %x on %v", []byte(p.DupEcho), op)
		}
		if p.DupEcho != nil && p.DupEcho.PSN() > PSNMask {
			t.Fatalf("DupEcho PSN %#x past 24 bits", p.DupEcho.PSN())
		}
		if (p.HoldEcho != nil) != (op == RCHoldEcho) {
			t.Fatalf("HoldEcho view %x on %v", []byte(p.HoldEcho), op)
		}
		if p.HoldEcho != nil && p.HoldEcho.PSN() > PSNMask {
			t.Fatalf("HoldEcho PSN %#x past 24 bits", p.HoldEcho.PSN())
		}
		_ = op.String()
	})
}

// FuzzParseSplit checks ParseSplit against Parse: split after the
// opcode's headers, it accepts exactly what Parse accepts of the joined
// packet, with the same headers and payload, its views inside their
// pieces; split anywhere else it fails.
func FuzzParseSplit(f *testing.F) {
	for i := range 256 {
		if op := Opcode(i); op.Valid() {
			f.Add(mkPacket(op, 0, 0), op.HeaderLen())
			f.Add(append(mkPacket(op, 0, 0), make([]byte, 64)...), op.HeaderLen())
		}
	}
	f.Fuzz(func(t *testing.T, b []byte, cut int) {
		if cut < 0 || cut > len(b) {
			return
		}
		head, tail := b[:cut:cut], b[cut:]
		sp, serr := ParseSplit(head, tail)
		whole, werr := Parse(b)
		if serr != nil {
			if sp.BTH != nil || sp.Payload != nil {
				t.Fatalf("views returned with error %v", serr)
			}
			if werr == nil && len(b) >= BTHLen && cut == whole.BTH.Opcode().HeaderLen() {
				t.Fatalf("split at the headers failed (%v), Parse accepted", serr)
			}
			return
		}
		if werr != nil {
			t.Fatalf("ParseSplit accepted what Parse rejects: %v", werr)
		}
		if cut != sp.BTH.Opcode().HeaderLen() {
			t.Fatalf("accepted a split at %d, headers are %d", cut, sp.BTH.Opcode().HeaderLen())
		}
		for _, v := range [][]byte{sp.BTH, sp.RETH, sp.AETH, sp.Imm, sp.IETH, sp.AtomicETH, sp.AtomicAckETH} {
			if !within(v, head) {
				t.Fatal("header view outside head")
			}
		}
		if len(sp.Payload) > 0 && !within(sp.Payload, tail) {
			t.Fatal("payload view outside tail")
		}
		if (sp.Payload == nil) != (whole.Payload == nil) || string(sp.Payload) != string(whole.Payload) ||
			string(sp.BTH) != string(whole.BTH) || string(sp.RETH) != string(whole.RETH) || string(sp.Imm) != string(whole.Imm) {
			t.Fatal("ParseSplit and Parse disagree")
		}
	})
}
