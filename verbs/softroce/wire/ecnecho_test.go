package wire

import "testing"

// TestECNEcho encodes an ECN echo, parses it back and reads both counts,
// including counts past 2^31, and checks that a truncated or padded echo
// does not parse.
func TestECNEcho(t *testing.T) {
	b := make([]byte, BTHLen+ECNEchoLen)
	BTH(b).Encode(&BTHFields{Opcode: RCECNEcho, PKey: DefaultPKey, DestQP: 7, PSN: 0x123456})
	ECNEcho(b[BTHLen:]).Encode(0xfffffff0, 0x80000001)
	p, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if p.ECNEcho == nil || p.ECNEcho.ECT() != 0xfffffff0 || p.ECNEcho.CE() != 0x80000001 || p.BTH.PSN() != 0x123456 {
		t.Fatalf("parsed %+v", p)
	}
	if p.AETH != nil || p.Payload != nil {
		t.Fatalf("an echo with an AETH or payload view: %+v", p)
	}
	if !RCECNEcho.Flags().Has(FlagResponse) || RCECNEcho.Flags().Has(FlagRequest) || RCECNEcho.String() != "RC_ECN_ECHO" {
		t.Fatalf("opcode %v flags %b", RCECNEcho, RCECNEcho.Flags())
	}
	if _, err := Parse(b[:len(b)-1]); err == nil {
		t.Fatal("a truncated echo parsed")
	}
	if _, err := Parse(append(b, 0, 0, 0, 0)); err == nil {
		t.Fatal("an echo with trailing bytes parsed")
	}
}
