package wire

import (
	"fmt"
	"testing"
)

func TestOpcodeTable(t *testing.T) {
	const (
		send  = FlagRequest | FlagSend | FlagPayload
		write = FlagRequest | FlagWrite | FlagPayload
		rresp = FlagResponse | FlagRead | FlagPayload
		only  = FlagFirst | FlagLast
	)
	tests := []struct {
		op    Opcode
		value uint8
		name  string
		flags OpFlags
		hlen  int
	}{
		{RCSendFirst, 0x00, "RC_SEND_FIRST", send | FlagFirst, 12},
		{RCSendMiddle, 0x01, "RC_SEND_MIDDLE", send | FlagMiddle, 12},
		{RCSendLast, 0x02, "RC_SEND_LAST", send | FlagLast, 12},
		{RCSendLastImm, 0x03, "RC_SEND_LAST_WITH_IMMEDIATE", send | FlagLast | FlagImm, 16},
		{RCSendOnly, 0x04, "RC_SEND_ONLY", send | only, 12},
		{RCSendOnlyImm, 0x05, "RC_SEND_ONLY_WITH_IMMEDIATE", send | only | FlagImm, 16},
		{RCWriteFirst, 0x06, "RC_RDMA_WRITE_FIRST", write | FlagFirst | FlagRETH, 28},
		{RCWriteMiddle, 0x07, "RC_RDMA_WRITE_MIDDLE", write | FlagMiddle, 12},
		{RCWriteLast, 0x08, "RC_RDMA_WRITE_LAST", write | FlagLast, 12},
		{RCWriteLastImm, 0x09, "RC_RDMA_WRITE_LAST_WITH_IMMEDIATE", write | FlagLast | FlagImm, 16},
		{RCWriteOnly, 0x0a, "RC_RDMA_WRITE_ONLY", write | only | FlagRETH, 28},
		{RCWriteOnlyImm, 0x0b, "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE", write | only | FlagRETH | FlagImm, 12 + 16 + 4},
		{RCReadRequest, 0x0c, "RC_RDMA_READ_REQUEST", FlagRequest | FlagRead | FlagRETH | only, 28},
		{RCReadResponseFirst, 0x0d, "RC_RDMA_READ_RESPONSE_FIRST", rresp | FlagFirst | FlagAETH, 16},
		{RCReadResponseMiddle, 0x0e, "RC_RDMA_READ_RESPONSE_MIDDLE", rresp | FlagMiddle, 12},
		{RCReadResponseLast, 0x0f, "RC_RDMA_READ_RESPONSE_LAST", rresp | FlagLast | FlagAETH, 16},
		{RCReadResponseOnly, 0x10, "RC_RDMA_READ_RESPONSE_ONLY", rresp | only | FlagAETH, 16},
		{RCAcknowledge, 0x11, "RC_ACKNOWLEDGE", FlagResponse | FlagAck | FlagAETH, 16},
		{RCAtomicAcknowledge, 0x12, "RC_ATOMIC_ACKNOWLEDGE", FlagResponse | FlagAtomic | FlagAETH | FlagAtomicAckETH, 24},
		{RCCompareSwap, 0x13, "RC_COMPARE_SWAP", FlagRequest | FlagAtomic | FlagAtomicETH | only, 40},
		{RCFetchAdd, 0x14, "RC_FETCH_ADD", FlagRequest | FlagAtomic | FlagAtomicETH | only, 40},
		{RCSendLastInv, 0x16, "RC_SEND_LAST_WITH_INVALIDATE", send | FlagLast | FlagIETH, 16},
		{RCSendOnlyInv, 0x17, "RC_SEND_ONLY_WITH_INVALIDATE", send | only | FlagIETH, 16},
		{RCSelectiveNAK, 0xe0, "RC_SELECTIVE_NAK", FlagResponse | FlagAck | FlagAETH | FlagPayload, 16},
		{RCECNEcho, 0xe1, "RC_ECN_ECHO", FlagResponse | FlagAck | FlagECNEcho, 20},
		{RCDuplicateEcho, 0xe2, "RC_DUPLICATE_ECHO", FlagResponse | FlagAck | FlagDupEcho, 20},
		{RCHoldEcho, 0xe3, "RC_HOLD_ECHO", FlagResponse | FlagAck | FlagHoldEcho, 20},
	}
	valid := make(map[Opcode]bool)
	for _, tc := range tests {
		valid[tc.op] = true
		if uint8(tc.op) != tc.value {
			t.Errorf("%s = %#x, want %#x", tc.name, uint8(tc.op), tc.value)
		}
		if got := tc.op.String(); got != tc.name {
			t.Errorf("%#x.String() = %q, want %q", tc.value, got, tc.name)
		}
		if !tc.op.Valid() {
			t.Errorf("%s not Valid", tc.name)
		}
		if got := tc.op.Flags(); got != tc.flags {
			t.Errorf("%s flags = %#x, want %#x", tc.name, got, tc.flags)
		}
		if got := tc.op.HeaderLen(); got != tc.hlen {
			t.Errorf("%s HeaderLen = %d, want %d", tc.name, got, tc.hlen)
		}
	}
	if len(valid) != 27 {
		t.Errorf("%d distinct opcodes in table, want 27", len(valid))
	}
	for i := range 256 {
		op := Opcode(i)
		if valid[op] {
			continue
		}
		if op.Valid() || op.Flags() != 0 || op.HeaderLen() != 0 {
			t.Errorf("%#x: Valid %v Flags %#x HeaderLen %d, want false 0 0", i, op.Valid(), op.Flags(), op.HeaderLen())
		}
		if got, want := op.String(), fmt.Sprintf("Opcode(0x%02x)", i); got != want {
			t.Errorf("String = %q, want %q", got, want)
		}
	}
}

// TestOpcodeFlagsConsistent checks invariants that must hold for every
// valid opcode, independently of the table above.
func TestOpcodeFlagsConsistent(t *testing.T) {
	extLen := []struct {
		f OpFlags
		n int
	}{
		{FlagRETH, RETHLen}, {FlagAETH, AETHLen}, {FlagImm, ImmDtLen}, {FlagIETH, IETHLen},
		{FlagAtomicETH, AtomicETHLen}, {FlagAtomicAckETH, AtomicAckETHLen}, {FlagECNEcho, ECNEchoLen},
		{FlagDupEcho, DupEchoLen}, {FlagHoldEcho, HoldEchoLen},
	}
	for i := range 256 {
		op := Opcode(i)
		if !op.Valid() {
			continue
		}
		f := op.Flags()
		n := BTHLen
		for _, e := range extLen {
			if f.Has(e.f) {
				n += e.n
			}
		}
		if n != op.HeaderLen() {
			t.Errorf("%v: HeaderLen %d, flags imply %d", op, op.HeaderLen(), n)
		}
		if f.Has(FlagRequest) == f.Has(FlagResponse) {
			t.Errorf("%v: must be exactly one of request/response", op)
		}
		kinds := 0
		for _, k := range []OpFlags{FlagSend, FlagWrite, FlagRead, FlagAtomic, FlagAck} {
			if f.Has(k) {
				kinds++
			}
		}
		if kinds != 1 {
			t.Errorf("%v: %d operation kinds", op, kinds)
		}
		if f.Has(FlagMiddle) && (f&(FlagFirst|FlagLast) != 0) {
			t.Errorf("%v: middle and first/last", op)
		}
		if f.Has(FlagRequest) && f&(FlagFirst|FlagMiddle|FlagLast) == 0 {
			t.Errorf("%v: request without position", op)
		}
		// Data carries payload; so does the selective NAK, its SACK bitmap.
		wantPayload := f&(FlagSend|FlagWrite) != 0 || f.Has(FlagRead|FlagResponse) || op == RCSelectiveNAK
		if f.Has(FlagPayload) != wantPayload {
			t.Errorf("%v: FlagPayload = %v, want %v", op, f.Has(FlagPayload), wantPayload)
		}
		if f.Has(FlagImm) && !f.Has(FlagLast) {
			t.Errorf("%v: immediate data on a non-last packet", op)
		}
		if f.Has(FlagAtomicAckETH) && !f.Has(FlagAETH) {
			t.Errorf("%v: AtomicAckETH without AETH", op)
		}
		if f.Has(FlagRETH) && !f.Has(FlagFirst) {
			t.Errorf("%v: RETH on a non-first packet", op)
		}
	}
}

func TestOpFlagsHas(t *testing.T) {
	f := RCWriteOnlyImm.Flags()
	tests := []struct {
		g    OpFlags
		want bool
	}{
		{0, true},
		{FlagRETH, true},
		{FlagRETH | FlagImm | FlagFirst | FlagLast, true},
		{FlagAETH, false},
		{FlagRETH | FlagAETH, false},
		{FlagMiddle, false},
	}
	for _, tc := range tests {
		if got := f.Has(tc.g); got != tc.want {
			t.Errorf("Has(%#x) = %v, want %v", tc.g, got, tc.want)
		}
	}
	if OpFlags(0).Has(FlagAck) {
		t.Error("zero flags has FlagAck")
	}
}
