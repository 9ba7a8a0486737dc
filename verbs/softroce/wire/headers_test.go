package wire

import (
	"bytes"
	"encoding/hex"
	"testing"
)

// dirty returns an n-byte buffer filled with 0xAA, so encoders are seen to
// write every byte.
func dirty(n int) []byte { return bytes.Repeat([]byte{0xaa}, n) }

func TestBTHEncode(t *testing.T) {
	tests := []struct {
		name string
		f    BTHFields
		hex  string
	}{
		{
			name: "vector 01",
			f:    BTHFields{Opcode: RCSendOnly, MigReq: true, PadCount: 3, PKey: 0xffff, DestQP: 0x12, AckReq: true, PSN: 0x100},
			hex:  "0470ffff000000128000010" + "0",
		},
		{
			name: "zero",
			f:    BTHFields{},
			hex:  "000000000000000000000000",
		},
		{
			name: "all ones",
			f: BTHFields{Opcode: 0xff, Solicited: true, MigReq: true, PadCount: 3, TVer: 0xf, PKey: 0xffff,
				FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff},
			hex: "ffffffff" + "c0ffffff" + "80ffffff",
		},
		{
			name: "fecn only, max qpn",
			f:    BTHFields{Opcode: RCAcknowledge, FECN: true, DestQP: 0xffffff, PSN: 0x000001},
			hex:  "11000000" + "80ffffff" + "00000001",
		},
		{
			name: "becn, pkey, tver",
			f:    BTHFields{Opcode: RCReadRequest, Solicited: true, TVer: 1, PKey: 0x8001, BECN: true, DestQP: 1, PSN: 0xabcdef},
			hex:  "0c818001" + "40000001" + "00abcdef",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := dirty(BTHLen)
			BTH(b).Encode(&tc.f)
			if got := hex.EncodeToString(b); got != tc.hex {
				t.Errorf("Encode = %s, want %s", got, tc.hex)
			}
			if got := BTH(b).Fields(); got != tc.f {
				t.Errorf("Fields = %+v, want %+v", got, tc.f)
			}
		})
	}
}

func TestBTHEncodeTruncates(t *testing.T) {
	b := dirty(BTHLen)
	BTH(b).Encode(&BTHFields{PadCount: 0xff, TVer: 0xf0, DestQP: 0xff000001, PSN: 0xfe000002})
	if got, want := hex.EncodeToString(b), "00300000"+"00000001"+"00000002"; got != want {
		t.Errorf("Encode = %s, want %s", got, want)
	}
}

func TestBTHSetters(t *testing.T) {
	for _, start := range []BTHFields{
		{},
		{Opcode: 0xff, Solicited: true, MigReq: true, PadCount: 3, TVer: 0xf, PKey: 0xffff, FECN: true, BECN: true, DestQP: 0xffffff, AckReq: true, PSN: 0xffffff},
	} {
		b := BTH(make([]byte, BTHLen))
		b.Encode(&start)
		want := start
		for _, psn := range []uint32{0, 1, 0x800000, 0xffffff, 0x1000000 | 0x42} {
			b.SetPSN(psn)
			want.PSN = psn & PSNMask
			if got := b.Fields(); got != want {
				t.Errorf("after SetPSN(%#x): %+v, want %+v", psn, got, want)
			}
		}
		for _, qp := range []uint32{0, 1, 0xffffff, 0xff000000 | 0x17} {
			b.SetDestQP(qp)
			want.DestQP = qp & PSNMask
			if got := b.Fields(); got != want {
				t.Errorf("after SetDestQP(%#x): %+v, want %+v", qp, got, want)
			}
		}
		b.SetPSN(0xabcdef)
		want.PSN = 0xabcdef
		for _, a := range []bool{true, false, false, true} {
			b.SetAckReq(a)
			want.AckReq = a
			if got := b.Fields(); got != want {
				t.Errorf("after SetAckReq(%v): %+v, want %+v", a, got, want)
			}
		}
	}
}

func TestRETH(t *testing.T) {
	tests := []struct {
		va           uint64
		rkey, dmaLen uint32
		hex          string
	}{
		{0x00007f0000001000, 0x00abcdef, 356, "00007f0000001000" + "00abcdef" + "00000164"},
		{0, 0, 0, "00000000000000000000000000000000"},
		{0xffffffffffffffff, 0xffffffff, 0xffffffff, "ffffffffffffffffffffffffffffffff"},
		{0x0123456789abcdef, 0x80000001, 0x7fffffff, "0123456789abcdef800000017fffffff"},
	}
	for _, tc := range tests {
		b := dirty(RETHLen + 2)
		r := RETH(b[1:])
		r.Encode(tc.va, tc.rkey, tc.dmaLen)
		if got := hex.EncodeToString(b[1 : 1+RETHLen]); got != tc.hex {
			t.Errorf("Encode = %s, want %s", got, tc.hex)
		}
		if b[0] != 0xaa || b[len(b)-1] != 0xaa {
			t.Errorf("Encode wrote outside the header")
		}
		if r.VA() != tc.va || r.RKey() != tc.rkey || r.DMALen() != tc.dmaLen {
			t.Errorf("got va %#x rkey %#x len %#x, want %#x %#x %#x", r.VA(), r.RKey(), r.DMALen(), tc.va, tc.rkey, tc.dmaLen)
		}
	}
}

func TestAETH(t *testing.T) {
	tests := []struct {
		s       Syndrome
		msn     uint32
		hex     string
		msnWant uint32
	}{
		{ACKSyndrome(31), 3, "1f000003", 3},
		{NAKSyndrome(NAKPSNSeqErr), 3, "60000003", 3},
		{0xff, 0xffffff, "ffffffff", 0xffffff},
		{RNRSyndrome(0x0e), 0x123456, "2e123456", 0x123456},
		{0, 0xff000001, "00000001", 1}, // MSN truncated to 24 bits, syndrome intact
	}
	for _, tc := range tests {
		b := dirty(AETHLen)
		a := AETH(b)
		a.Encode(tc.s, tc.msn)
		if got := hex.EncodeToString(b); got != tc.hex {
			t.Errorf("Encode(%#x, %#x) = %s, want %s", uint8(tc.s), tc.msn, got, tc.hex)
		}
		if a.Syndrome() != tc.s || a.MSN() != tc.msnWant {
			t.Errorf("got %#x/%#x, want %#x/%#x", uint8(a.Syndrome()), a.MSN(), uint8(tc.s), tc.msnWant)
		}
	}
}

func TestSyndrome(t *testing.T) {
	tests := []struct {
		s     Syndrome
		kind  SyndromeKind
		value uint8
		str   string
	}{
		{0x00, SyndromeACK, 0, "ACK(credits=0)"},
		{0x1f, SyndromeACK, 31, "ACK(credits=31)"},
		{0x2e, SyndromeRNR, 14, "RNR_NAK(timer=14)"},
		{0x20, SyndromeRNR, 0, "RNR_NAK(timer=0)"},
		{0x60, SyndromeNAK, 0, "NAK(PSN_SEQ_ERR)"},
		{0x61, SyndromeNAK, 1, "NAK(INVALID_REQUEST)"},
		{0x62, SyndromeNAK, 2, "NAK(REMOTE_ACCESS_ERR)"},
		{0x63, SyndromeNAK, 3, "NAK(REMOTE_OP_ERR)"},
		{0x64, SyndromeNAK, 4, "NAK(INVALID_RD_REQUEST)"},
		{0x7f, SyndromeNAK, 31, "NAK(code=31)"},
		{0x40, SyndromeReserved, 0, "Syndrome(0x40)"},
		{0x5f, SyndromeReserved, 31, "Syndrome(0x5f)"},
		{0x80, SyndromeReserved, 0, "Syndrome(0x80)"},
		{0x9f, SyndromeReserved, 31, "Syndrome(0x9f)"},
		{0xe0, SyndromeReserved, 0, "Syndrome(0xe0)"},
		{0xff, SyndromeReserved, 31, "Syndrome(0xff)"},
	}
	for _, tc := range tests {
		if got := tc.s.Kind(); got != tc.kind {
			t.Errorf("%#x.Kind() = %v, want %v", uint8(tc.s), got, tc.kind)
		}
		if got := tc.s.Value(); got != tc.value {
			t.Errorf("%#x.Value() = %d, want %d", uint8(tc.s), got, tc.value)
		}
		if got := tc.s.String(); got != tc.str {
			t.Errorf("%#x.String() = %q, want %q", uint8(tc.s), got, tc.str)
		}
	}
	ctors := []struct {
		got, want Syndrome
	}{
		{ACKSyndrome(0), 0x00},
		{ACKSyndrome(5), 0x05},
		{ACKSyndrome(31), 0x1f},
		{ACKSyndrome(0xff), 0x1f},
		{ACKSyndrome(CreditsInvalid), 0x1f},
		{RNRSyndrome(0), 0x20},
		{RNRSyndrome(31), 0x3f},
		{RNRSyndrome(0xe1), 0x21},
		{NAKSyndrome(NAKPSNSeqErr), 0x60},
		{NAKSyndrome(NAKInvalidRequest), 0x61},
		{NAKSyndrome(NAKRemoteAccess), 0x62},
		{NAKSyndrome(NAKRemoteOp), 0x63},
		{NAKSyndrome(NAKInvalidRDRequest), 0x64},
		{NAKSyndrome(0xff), 0x7f},
	}
	for i, c := range ctors {
		if c.got != c.want {
			t.Errorf("constructor %d: %#x, want %#x", i, uint8(c.got), uint8(c.want))
		}
	}
	for v := range 32 {
		if s := ACKSyndrome(uint8(v)); s.Kind() != SyndromeACK || s.Value() != uint8(v) {
			t.Errorf("ACKSyndrome(%d) = %#x", v, uint8(s))
		}
		if s := RNRSyndrome(uint8(v)); s.Kind() != SyndromeRNR || s.Value() != uint8(v) {
			t.Errorf("RNRSyndrome(%d) = %#x", v, uint8(s))
		}
		if s := NAKSyndrome(NAKCode(v)); s.Kind() != SyndromeNAK || s.Value() != uint8(v) {
			t.Errorf("NAKSyndrome(%d) = %#x", v, uint8(s))
		}
	}
	kinds := map[SyndromeKind]string{SyndromeACK: "ACK", SyndromeRNR: "RNR_NAK", SyndromeNAK: "NAK", SyndromeReserved: "RESERVED"}
	for k, s := range kinds {
		if k.String() != s {
			t.Errorf("%d.String() = %q, want %q", k, k.String(), s)
		}
	}
}

func TestImmDtIETH(t *testing.T) {
	for _, v := range []uint32{0, 1, 0x01020304, 0xdeadbeef, 0xffffffff} {
		b := dirty(ImmDtLen)
		ImmDt(b).Set(v)
		if got := ImmDt(b).Imm(); got != v {
			t.Errorf("ImmDt round trip %#x -> %#x", v, got)
		}
		if b[0] != byte(v>>24) || b[3] != byte(v) {
			t.Errorf("ImmDt not big-endian: % x for %#x", b, v)
		}
		c := dirty(IETHLen)
		IETH(c).Set(v)
		if got := IETH(c).RKey(); got != v {
			t.Errorf("IETH round trip %#x -> %#x", v, got)
		}
		if !bytes.Equal(b, c) {
			t.Errorf("IETH and ImmDt encode differently: % x vs % x", c, b)
		}
	}
}

func TestAtomicETH(t *testing.T) {
	tests := []struct {
		va      uint64
		rkey    uint32
		swap    uint64
		compare uint64
		hex     string
	}{
		{0, 0, 0, 0, "00000000000000000000000000000000000000000000000000000000"},
		{0xffffffffffffffff, 0xffffffff, 0xffffffffffffffff, 0xffffffffffffffff, "ffffffffffffffffffffffffffffffffffffffffffffffffffffffff"},
		{0x0123456789abcdef, 0xa1b2c3d4, 0x1122334455667788, 0x99aabbccddeeff00,
			"0123456789abcdef" + "a1b2c3d4" + "1122334455667788" + "99aabbccddeeff00"},
	}
	for _, tc := range tests {
		b := dirty(AtomicETHLen)
		a := AtomicETH(b)
		a.Encode(tc.va, tc.rkey, tc.swap, tc.compare)
		if got := hex.EncodeToString(b); got != tc.hex {
			t.Errorf("Encode = %s, want %s", got, tc.hex)
		}
		if a.VA() != tc.va || a.RKey() != tc.rkey || a.SwapAdd() != tc.swap || a.Compare() != tc.compare {
			t.Errorf("round trip: %#x %#x %#x %#x", a.VA(), a.RKey(), a.SwapAdd(), a.Compare())
		}
	}
}

func TestAtomicAckETH(t *testing.T) {
	for _, v := range []uint64{0, 1, 0x0102030405060708, 0xffffffffffffffff} {
		b := dirty(AtomicAckETHLen)
		AtomicAckETH(b).Set(v)
		if got := AtomicAckETH(b).OrigData(); got != v {
			t.Errorf("round trip %#x -> %#x", v, got)
		}
		if b[0] != byte(v>>56) || b[7] != byte(v) {
			t.Errorf("not big-endian: % x for %#x", b, v)
		}
	}
}
