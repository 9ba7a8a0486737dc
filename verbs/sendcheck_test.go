package verbs

import (
	"errors"
	"testing"
)

func TestCheckSendWR(t *testing.T) {
	sge := func(n uint32) []SGE { return []SGE{{Length: n}} }
	for _, tc := range []struct {
		name string
		wr   SendWR
		len  uint64
		ok   bool
	}{
		{"send", SendWR{Opcode: WRSend, SGL: []SGE{{Length: 3}, {Length: 4}}}, 7, true},
		{"empty write", SendWR{Opcode: WRRDMAWrite}, 0, true},
		{"2 GiB", SendWR{Opcode: WRRDMAWriteWithImm, SGL: []SGE{{Length: 1 << 31}}}, 1 << 31, true},
		{"over 2 GiB", SendWR{Opcode: WRRDMARead, SGL: []SGE{{Length: 1 << 31}, {Length: 1}}}, 0, false},
		{"too many SGEs", SendWR{Opcode: WRSend, SGL: make([]SGE, 3)}, 0, false},
		{"atomic", SendWR{Opcode: WRAtomicFetchAdd, SGL: sge(8)}, 8, true},
		{"atomic of 4", SendWR{Opcode: WRAtomicCmpAndSwp, SGL: sge(4)}, 0, false},
		{"atomic of two SGEs", SendWR{Opcode: WRAtomicCmpAndSwp, SGL: []SGE{{Length: 8}, {Length: 8}}}, 0, false},
		{"unknown opcode", SendWR{Opcode: 99}, 0, false},
		{"inline write", SendWR{Opcode: WRRDMAWrite, Flags: SendInline, SGL: sge(16)}, 16, true},
		{"inline read", SendWR{Opcode: WRRDMARead, Flags: SendInline, SGL: sge(16)}, 0, false},
		{"inline atomic", SendWR{Opcode: WRAtomicFetchAdd, Flags: SendInline, SGL: sge(8)}, 0, false},
	} {
		n, err := CheckSendWR(&tc.wr, 2)
		if tc.ok && (err != nil || n != tc.len) {
			t.Errorf("%s: %d, %v; want %d, nil", tc.name, n, err, tc.len)
		}
		if !tc.ok && !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}
