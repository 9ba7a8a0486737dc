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
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.DupEcho == nil || p.DupEcho.Count() != 0x80000003 || p.DupEcho.PSN() != 0x654321 || p.BTH.PSN() != 0x123456 {
		t.Fatalf("parsed %+v", p)
	}
	if b[BTHLen+4] != 0 {
		t.Fatalf("reserved byte %#x, want 0", b[BTHLen+4])
	}
	if p.AETH != nil || p.ECNEcho != nil || p.Payload != nil {
		t.Fatalf("an echo with another view: %+v", p)
	}
	if !RCDuplicateEcho.Flags().Has(FlagResponse) || RCDuplicateEcho.Flags().Has(FlagRequest) || RCDuplicateEcho.String() != "RC_DUPLICATE_ECHO" {
		t.Fatalf("opcode %v flags %b", RCDuplicateEcho, RCDuplicateEcho.Flags())
	}
	if _, err := Parse(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated echo parsed")
	}
	if _, err := Parse(append(b, 0, 0, 0, 0)); err == nil {
		t.Fatal("an echo with trailing bytes parsed")
	}
}
