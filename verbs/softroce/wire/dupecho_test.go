package wire

import "testing"

// TestDupEcho encodes a duplicate echo, parses it back and reads the count
// (past 2^31) and the PSN, checks that the PSN keeps 24 bits and the
// reserved byte stays 0, and that a truncated or padded echo does not
// parse.
func TestDupEcho(t *testing.T) {
	b := make([]byte, BTHLen+DupEchoLen)
	BTH(b).Encode(&BTHFields{Opcode: RCDuplicateEcho, PKey: DefaultPKey, DestQP: 7, PSN: 0x123456})
	DupEcho(b[BTHLen:]).Encode(0x80000003, 0xff654321)
	p := checkEcho(t, b, "RC_DUPLICATE_ECHO")
	if p.DupEcho == nil || p.DupEcho.Count() != 0x80000003 || p.DupEcho.PSN() != 0x654321 || p.ECNEcho != nil || p.HoldEcho != nil {
		t.Fatalf("parsed %+v", p)
	}
}

// TestHoldEcho does the same for a hold echo: the hold (past 2^31 µs)
// and the timed PSN.
func TestHoldEcho(t *testing.T) {
	b := make([]byte, BTHLen+HoldEchoLen)
	BTH(b).Encode(&BTHFields{Opcode: RCHoldEcho, PKey: DefaultPKey, DestQP: 7, PSN: 0x123456})
	HoldEcho(b[BTHLen:]).Encode(0x80000007, 0xfe654320)
	p := checkEcho(t, b, "RC_HOLD_ECHO")
	if p.HoldEcho == nil || p.HoldEcho.Hold() != 0x80000007 || p.HoldEcho.PSN() != 0x654320 || p.ECNEcho != nil || p.DupEcho != nil {
		t.Fatalf("parsed %+v", p)
	}
}

// checkEcho parses echo b (a BTH with PSN 0x123456, then an 8-byte
// header whose fifth byte is reserved) and checks what every echo shares:
// the BTH, the reserved byte, no IBA header or payload, a response
// opcode named name, and that a truncated or padded echo does not parse.
func checkEcho(t *testing.T, b []byte, name string) Packet {
	t.Helper()
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.BTH.PSN() != 0x123456 || b[BTHLen+4] != 0 {
		t.Fatalf("PSN %#x, reserved byte %#x", p.BTH.PSN(), b[BTHLen+4])
	}
	if p.AETH != nil || p.Payload != nil {
		t.Fatalf("an echo with another view: %+v", p)
	}
	op := p.BTH.Opcode()
	if !op.Flags().Has(FlagResponse) || op.Flags().Has(FlagRequest) || op.String() != name {
		t.Fatalf("opcode %v flags %b", op, op.Flags())
	}
	if _, err := Parse(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated echo parsed")
	}
	if _, err := Parse(append(b, 0, 0, 0, 0)); err == nil {
		t.Fatal("an echo with trailing bytes parsed")
	}
	return p
}
