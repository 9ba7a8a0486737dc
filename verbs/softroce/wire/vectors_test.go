package wire

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"strings"
	"testing"
)

// Reference vectors: the frames live in testdata/vectors.hex (one
// "name frame_hex" per line); the expected field values below are copied
// from the vectors' description (vectors.txt of the shared reference set).

type rethWant struct {
	va           uint64
	rkey, dmaLen uint32
}

type aethWant struct {
	syn Syndrome
	msn uint32
}

type vectorWant struct {
	name     string
	src, dst string // IPv4 addresses; UDP 0xc001 -> 4791, IP ID 0
	bth      BTHFields
	reth     *rethWant
	imm      *uint32
	aeth     *aethWant
	payload  string // hex, without pad
	icrc     uint32 // CRC value (wire bytes read little-endian)
}

func u32p(v uint32) *uint32 { return &v }

const (
	vecSrcPort = 0xc001
	vecDstPort = 4791
	ethLen     = 14
	ipUDPLen   = 28
)

var vectorWants = []vectorWant{
	{
		name: "01_rc_send_only",
		src:  "192.0.2.1", dst: "192.0.2.2",
		bth:     BTHFields{Opcode: RCSendOnly, Solicited: false, MigReq: true, PadCount: 3, TVer: 0, PKey: 0xffff, FECN: false, BECN: false, DestQP: 0x12, AckReq: true, PSN: 0x100},
		payload: "68656c6c6f2c20526f4345210a",
		icrc:    0x644e49a8,
	},
	{
		name: "02_rc_send_only_imm",
		src:  "192.0.2.1", dst: "192.0.2.2",
		bth:     BTHFields{Opcode: RCSendOnlyImm, Solicited: true, MigReq: true, PadCount: 0, TVer: 0, PKey: 0xffff, FECN: false, BECN: false, DestQP: 0x12, AckReq: true, PSN: 0x101},
		imm:     u32p(0x1020304),
		payload: "000102030405060708090a0b0c0d0e0f",
		icrc:    0xcd970a73,
	},
	{
		name: "03_rc_rdma_write_first",
		src:  "192.0.2.1", dst: "192.0.2.2",
		bth:     BTHFields{Opcode: RCWriteFirst, Solicited: false, MigReq: true, PadCount: 0, TVer: 0, PKey: 0xffff, FECN: false, BECN: false, DestQP: 0x12, AckReq: false, PSN: 0x102},
		reth:    &rethWant{va: 0x7f0000001000, rkey: 0xabcdef, dmaLen: 0x164},
		payload: "030a11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eaf1f8ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad1d8dfe6edf4fb020910171e252c333a41484f565d646b727980878e959ca3aab1b8bfc6cdd4dbe2e9f0f7fe050c131a21282f363d444b525960676e757c838a91989fa6adb4bbc2c9d0d7dee5ecf3fa01080f161d242b323940474e555c636a71787f868d949ba2a9b0b7bec5ccd3dae1e8eff6fd040b121920272e353c434a51585f666d747b828990979ea5acb3bac1c8cfd6dde4ebf2f900070e151c232a31383f464d545b626970777e858c939aa1a8afb6bdc4cbd2d9e0e7eef5fc",
		icrc:    0x06b44cca,
	},
	{
		name: "04_rc_rdma_write_last_imm",
		src:  "192.0.2.1", dst: "192.0.2.2",
		bth:     BTHFields{Opcode: RCWriteLastImm, Solicited: true, MigReq: true, PadCount: 0, TVer: 0, PKey: 0xffff, FECN: false, BECN: false, DestQP: 0x12, AckReq: true, PSN: 0x103},
		imm:     u32p(0xdeadbeef),
		payload: "030a11181f262d343b424950575e656c737a81888f969da4abb2b9c0c7ced5dce3eaf1f8ff060d141b222930373e454c535a61686f767d848b9299a0a7aeb5bcc3cad1d8dfe6edf4fb020910171e252c333a41484f565d646b727980878e959ca3aab1b8",
		icrc:    0x6867a435,
	},
	{
		name: "05_rc_ack",
		src:  "192.0.2.2", dst: "192.0.2.1",
		bth:  BTHFields{Opcode: RCAcknowledge, Solicited: false, MigReq: true, PadCount: 0, TVer: 0, PKey: 0xffff, FECN: false, BECN: false, DestQP: 0x11, AckReq: false, PSN: 0x103},
		aeth: &aethWant{syn: 0x1f, msn: 0x3},
		icrc: 0x03702b98,
	},
	{
		name: "06_rc_nak_psn_seq_err",
		src:  "192.0.2.2", dst: "192.0.2.1",
		bth:  BTHFields{Opcode: RCAcknowledge, Solicited: false, MigReq: true, PadCount: 0, TVer: 0, PKey: 0xffff, FECN: false, BECN: false, DestQP: 0x11, AckReq: false, PSN: 0x104},
		aeth: &aethWant{syn: 0x60, msn: 0x3},
		icrc: 0x820c4742,
	},
}

// badVector is the negative vector: 01 with the first payload byte flipped
// and the ICRC left unchanged. badICRCCorrect is the ICRC it should carry,
// as wire bytes.
const (
	badVector      = "90_bad_icrc_send_only"
	badICRCCorrect = "39d826ca"
)

// loadVectors reads testdata/vectors.hex into a name -> frame map, keeping
// the file order in names.
func loadVectors(tb testing.TB) (frames map[string][]byte, names []string) {
	tb.Helper()
	return loadHexFrames(tb, "testdata/vectors.hex")
}

// loadHexFrames reads a file of "name hex" lines ('#' starts a comment).
func loadHexFrames(tb testing.TB, path string) (frames map[string][]byte, names []string) {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	frames = make(map[string][]byte)
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, hx, ok := strings.Cut(line, " ")
		if !ok {
			tb.Fatalf("bad line %q", line)
		}
		b, err := hex.DecodeString(strings.TrimSpace(hx))
		if err != nil {
			tb.Fatalf("%s: %v", name, err)
		}
		frames[name] = b
		names = append(names, name)
	}
	if err := sc.Err(); err != nil {
		tb.Fatal(err)
	}
	return frames, names
}

// splitFrame splits an Ethernet/IPv4/UDP frame into the IP+UDP headers, the
// packet from BTH through pad, and the 4 ICRC bytes.
func splitFrame(tb testing.TB, frame []byte) (ipUDP, pkt, icrc []byte) {
	tb.Helper()
	if len(frame) < ethLen+ipUDPLen+BTHLen+ICRCLen {
		tb.Fatalf("frame too short: %d", len(frame))
	}
	if frame[12] != 0x08 || frame[13] != 0x00 || frame[ethLen] != 0x45 || frame[ethLen+9] != 17 {
		tb.Fatalf("not Ethernet/IPv4(no options)/UDP: % x", frame[:ethLen+10])
	}
	roce := frame[ethLen+ipUDPLen:]
	return frame[ethLen : ethLen+ipUDPLen], roce[:len(roce)-ICRCLen], roce[len(roce)-ICRCLen:]
}

func vectorPseudoHeader(tb testing.TB, src, dst string) *PseudoHeader {
	tb.Helper()
	return &PseudoHeader{
		Src: netip.AddrPortFrom(netip.MustParseAddr(src), vecSrcPort),
		Dst: netip.AddrPortFrom(netip.MustParseAddr(dst), vecDstPort),
	}
}

func mustHex(tb testing.TB, s string) []byte {
	tb.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func TestVectorsFileComplete(t *testing.T) {
	frames, names := loadVectors(t)
	if len(names) != len(vectorWants)+1 {
		t.Errorf("testdata has %d vectors, want %d", len(names), len(vectorWants)+1)
	}
	for _, w := range vectorWants {
		if frames[w.name] == nil {
			t.Errorf("testdata lacks %s", w.name)
		}
	}
	if frames[badVector] == nil {
		t.Errorf("testdata lacks %s", badVector)
	}
}

func TestVectors(t *testing.T) {
	frames, _ := loadVectors(t)
	for _, w := range vectorWants {
		t.Run(w.name, func(t *testing.T) {
			frame := frames[w.name]
			if frame == nil {
				t.Fatal("missing frame")
			}
			ipUDP, pkt, icrcBytes := splitFrame(t, frame)
			ph := vectorPseudoHeader(t, w.src, w.dst)

			// The frame matches the pseudo header we build from the table.
			if got := netip.AddrFrom4([4]byte(ipUDP[12:16])); got != ph.Src.Addr() {
				t.Errorf("frame src %v, want %v", got, ph.Src.Addr())
			}
			if got := netip.AddrFrom4([4]byte(ipUDP[16:20])); got != ph.Dst.Addr() {
				t.Errorf("frame dst %v, want %v", got, ph.Dst.Addr())
			}

			// ICRC.
			if got := ICRCOf(icrcBytes); got != w.icrc {
				t.Errorf("ICRCOf = %#08x, want %#08x", got, w.icrc)
			}
			if got := ComputeICRCFromHeaders(ipUDP, pkt); got != w.icrc {
				t.Errorf("ComputeICRCFromHeaders = %#08x, want %#08x", got, w.icrc)
			}
			if got := ComputeICRC(ph, pkt); got != w.icrc {
				t.Errorf("ComputeICRC = %#08x, want %#08x", got, w.icrc)
			}
			if got := refICRC(ipUDP, pkt); got != w.icrc {
				t.Errorf("test reference ICRC = %#08x, want %#08x", got, w.icrc)
			}

			// Parse.
			p, err := Parse(pkt)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			checkBTH(t, p.BTH, &w.bth)
			if got := p.Opcode(); got != w.bth.Opcode {
				t.Errorf("Packet.Opcode = %v, want %v", got, w.bth.Opcode)
			}
			if (p.RETH != nil) != (w.reth != nil) {
				t.Errorf("RETH present = %v, want %v", p.RETH != nil, w.reth != nil)
			} else if w.reth != nil {
				if p.RETH.VA() != w.reth.va || p.RETH.RKey() != w.reth.rkey || p.RETH.DMALen() != w.reth.dmaLen {
					t.Errorf("RETH = va %#x rkey %#x len %d, want %+v", p.RETH.VA(), p.RETH.RKey(), p.RETH.DMALen(), *w.reth)
				}
			}
			if (p.Imm != nil) != (w.imm != nil) {
				t.Errorf("ImmDt present = %v, want %v", p.Imm != nil, w.imm != nil)
			} else if w.imm != nil && p.Imm.Imm() != *w.imm {
				t.Errorf("Imm = %#x, want %#x", p.Imm.Imm(), *w.imm)
			}
			if (p.AETH != nil) != (w.aeth != nil) {
				t.Errorf("AETH present = %v, want %v", p.AETH != nil, w.aeth != nil)
			} else if w.aeth != nil {
				if p.AETH.Syndrome() != w.aeth.syn || p.AETH.MSN() != w.aeth.msn {
					t.Errorf("AETH = %v msn %d, want %v msn %d", p.AETH.Syndrome(), p.AETH.MSN(), w.aeth.syn, w.aeth.msn)
				}
			}
			if p.IETH != nil || p.AtomicETH != nil || p.AtomicAckETH != nil {
				t.Errorf("unexpected IETH/AtomicETH/AtomicAckETH views")
			}
			wantPayload := mustHex(t, w.payload)
			if !bytes.Equal(p.Payload, wantPayload) {
				t.Errorf("payload = %x, want %x", p.Payload, wantPayload)
			}
			if w.bth.Opcode.Flags().Has(FlagPayload) && p.Payload == nil {
				t.Errorf("payload-carrying opcode gave nil Payload")
			}

			// Re-encode from the field values into a fresh buffer.
			hl := w.bth.Opcode.HeaderLen()
			pad := PadFor(len(wantPayload))
			if pad != int(w.bth.PadCount) {
				t.Errorf("PadFor(%d) = %d, want pad count %d", len(wantPayload), pad, w.bth.PadCount)
			}
			buf := make([]byte, hl+len(wantPayload)+pad+ICRCLen)
			BTH(buf).Encode(&w.bth)
			off := BTHLen
			if w.reth != nil {
				RETH(buf[off:]).Encode(w.reth.va, w.reth.rkey, w.reth.dmaLen)
				off += RETHLen
			}
			if w.aeth != nil {
				AETH(buf[off:]).Encode(w.aeth.syn, w.aeth.msn)
				off += AETHLen
			}
			if w.imm != nil {
				ImmDt(buf[off:]).Set(*w.imm)
				off += ImmDtLen
			}
			if off != hl {
				t.Fatalf("encoded %d header bytes, HeaderLen says %d", off, hl)
			}
			copy(buf[hl:], wantPayload)
			end := len(buf) - ICRCLen
			PutICRC(buf[end:], ComputeICRC(ph, buf[:end]))
			if want := frame[ethLen+ipUDPLen:]; !bytes.Equal(buf, want) {
				t.Errorf("re-encoded packet differs:\n got %x\nwant %x", buf, want)
			}
		})
	}
}

func checkBTH(t *testing.T, b BTH, w *BTHFields) {
	t.Helper()
	if got := b.Fields(); got != *w {
		t.Errorf("BTH fields = %+v, want %+v", got, *w)
	}
	// Check the individual accessors too, not only Fields.
	if b.Opcode() != w.Opcode || b.Solicited() != w.Solicited || b.MigReq() != w.MigReq ||
		b.PadCount() != int(w.PadCount) || b.TVer() != w.TVer || b.PKey() != w.PKey ||
		b.FECN() != w.FECN || b.BECN() != w.BECN || b.DestQP() != w.DestQP ||
		b.AckReq() != w.AckReq || b.PSN() != w.PSN {
		t.Errorf("BTH accessors disagree with %+v", *w)
	}
}

func TestVectorBadICRC(t *testing.T) {
	frames, _ := loadVectors(t)
	frame := frames[badVector]
	if frame == nil {
		t.Fatal("missing frame")
	}
	ipUDP, pkt, icrcBytes := splitFrame(t, frame)
	ph := vectorPseudoHeader(t, "192.0.2.1", "192.0.2.2")
	wire := ICRCOf(icrcBytes)
	correct := ICRCOf(mustHex(t, badICRCCorrect))
	if got := ComputeICRCFromHeaders(ipUDP, pkt); got == wire || got != correct {
		t.Errorf("ComputeICRCFromHeaders = %#08x; wire %#08x must differ, correct is %#08x", got, wire, correct)
	}
	if got := ComputeICRC(ph, pkt); got == wire || got != correct {
		t.Errorf("ComputeICRC = %#08x; wire %#08x must differ, correct is %#08x", got, wire, correct)
	}
	// The headers themselves are fine.
	p, err := Parse(pkt)
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if p.BTH.Opcode() != RCSendOnly || len(p.Payload) != 13 || p.Payload[0] != 0x69 {
		t.Errorf("unexpected parse: %v payload %x", p.BTH.Opcode(), p.Payload)
	}
}

// TestICRCMasking checks which header fields the ICRC covers, on vector 03.
func TestICRCMasking(t *testing.T) {
	frames, _ := loadVectors(t)
	ipUDP0, pkt0, icrcBytes := splitFrame(t, frames["03_rc_rdma_write_first"])
	want := ICRCOf(icrcBytes)
	tests := []struct {
		name    string
		ipOff   int // offset in ipUDP, or -1
		pktOff  int // offset in pkt, or -1
		xor     byte
		covered bool
	}{
		{"ipv4 tos", 1, -1, 0xb8, false},
		{"ipv4 ttl", 8, -1, 0x3f, false},
		{"ipv4 checksum hi", 10, -1, 0x12, false},
		{"ipv4 checksum lo", 11, -1, 0x34, false},
		{"udp checksum", 26, -1, 0x55, false},
		{"udp checksum lo", 27, -1, 0x01, false},
		{"bth fecn", -1, 4, 0x80, false},
		{"bth becn", -1, 4, 0x40, false},
		{"bth resv6", -1, 4, 0x3f, false},
		{"ipv4 id", 5, -1, 0x01, true},
		{"ipv4 flags", 6, -1, 0x40, true},
		{"ipv4 src", 15, -1, 0x01, true},
		{"ipv4 dst", 19, -1, 0x01, true},
		{"udp sport", 21, -1, 0x01, true},
		{"udp length", 25, -1, 0x04, true},
		{"bth opcode", -1, 0, 0x01, true},
		{"bth flags", -1, 1, 0x80, true},
		{"bth pkey", -1, 3, 0x01, true},
		{"bth destqp", -1, 7, 0x01, true},
		{"bth ackreq", -1, 8, 0x80, true},
		{"bth psn", -1, 11, 0x01, true},
		{"reth", -1, 12, 0x01, true},
		{"payload last", -1, len(pkt0) - 1, 0x01, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ipUDP := bytes.Clone(ipUDP0)
			pkt := bytes.Clone(pkt0)
			if tc.ipOff >= 0 {
				ipUDP[tc.ipOff] ^= tc.xor
			} else {
				pkt[tc.pktOff] ^= tc.xor
			}
			got := ComputeICRCFromHeaders(ipUDP, pkt)
			if (got != want) != tc.covered {
				t.Errorf("ICRC %#08x vs original %#08x; field covered = %v", got, want, tc.covered)
			}
			if ref := refICRC(ipUDP, pkt); ref != got {
				t.Errorf("reference %#08x != %#08x", ref, got)
			}
			if !bytes.Equal(ipUDP0, frames["03_rc_rdma_write_first"][ethLen:ethLen+ipUDPLen]) {
				t.Errorf("input modified")
			}
		})
	}
}
