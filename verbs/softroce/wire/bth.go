package wire

import "encoding/binary"

// BTH is a view of the 12-byte Base Transport Header:
//
//	byte 0     opcode
//	byte 1     SE(7) M(6) PadCnt(5:4) TVer(3:0)
//	bytes 2-3  P_Key
//	byte 4     FECN(7) BECN(6) reserved(5:0)
//	bytes 5-7  DestQP
//	byte 8     AckReq(7) reserved(6:0)
//	bytes 9-11 PSN
//
// Methods require len(b) >= BTHLen.
type BTH []byte

// BTHFields holds the values of every BTH field, for BTH.Encode.
type BTHFields struct {
	// Opcode is the packet's opcode.
	Opcode Opcode
	// Solicited is the solicited event (SE) bit.
	Solicited bool
	// MigReq is the migration state (M) bit.
	MigReq bool
	// PadCount is the number of pad bytes after the payload (0-3).
	PadCount uint8
	// TVer is the transport header version (0).
	TVer uint8
	// PKey is the partition key.
	PKey uint16
	// FECN is the forward explicit congestion notification bit.
	FECN bool
	// BECN is the backward explicit congestion notification bit.
	BECN bool
	// DestQP is the 24-bit destination queue pair number.
	DestQP uint32
	// AckReq is the acknowledge request (A) bit.
	AckReq bool
	// PSN is the 24-bit packet sequence number.
	PSN uint32
}

const (
	bthOpcode = 0
	bthFlags  = 1
	bthPKey   = 2
	bthECN    = 4
	bthQP     = 4 // 32-bit word whose low 24 bits are DestQP
	bthAck    = 8
	bthPSN    = 8 // 32-bit word whose low 24 bits are PSN

	bthSE     = 0x80
	bthMig    = 0x40
	bthFECN   = 0x80
	bthBECN   = 0x40
	bthAckReq = 0x80
)

// Opcode returns the opcode field.
func (b BTH) Opcode() Opcode { return Opcode(b[bthOpcode]) }

// Solicited returns the solicited event (SE) bit.
func (b BTH) Solicited() bool { return b[bthFlags]&bthSE != 0 }

// MigReq returns the migration state (M) bit.
func (b BTH) MigReq() bool { return b[bthFlags]&bthMig != 0 }

// PadCount returns the number of pad bytes (0-3) after the payload.
func (b BTH) PadCount() int { return int(b[bthFlags]>>4) & 3 }

// TVer returns the transport header version.
func (b BTH) TVer() uint8 { return b[bthFlags] & 0xf }

// PKey returns the partition key.
func (b BTH) PKey() uint16 { return binary.BigEndian.Uint16(b[bthPKey:]) }

// FECN returns the forward explicit congestion notification bit.
func (b BTH) FECN() bool { return b[bthECN]&bthFECN != 0 }

// BECN returns the backward explicit congestion notification bit.
func (b BTH) BECN() bool { return b[bthECN]&bthBECN != 0 }

// DestQP returns the 24-bit destination queue pair number.
func (b BTH) DestQP() uint32 { return binary.BigEndian.Uint32(b[bthQP:]) & PSNMask }

// AckReq returns the acknowledge request (A) bit.
func (b BTH) AckReq() bool { return b[bthAck]&bthAckReq != 0 }

// PSN returns the 24-bit packet sequence number.
func (b BTH) PSN() uint32 { return binary.BigEndian.Uint32(b[bthPSN:]) & PSNMask }

// Encode writes all 12 bytes of the BTH from f. Reserved bits are zeroed;
// PadCount, TVer, DestQP and PSN are truncated to their field widths.
func (b BTH) Encode(f *BTHFields) {
	_ = b[BTHLen-1]
	b[bthOpcode] = byte(f.Opcode)
	flags := (f.PadCount&3)<<4 | f.TVer&0xf
	if f.Solicited {
		flags |= bthSE
	}
	if f.MigReq {
		flags |= bthMig
	}
	b[bthFlags] = flags
	binary.BigEndian.PutUint16(b[bthPKey:], f.PKey)
	qp := f.DestQP & PSNMask
	if f.FECN {
		qp |= bthFECN << 24
	}
	if f.BECN {
		qp |= bthBECN << 24
	}
	binary.BigEndian.PutUint32(b[bthQP:], qp)
	psn := f.PSN & PSNMask
	if f.AckReq {
		psn |= bthAckReq << 24
	}
	binary.BigEndian.PutUint32(b[bthPSN:], psn)
}

// Fields returns the values of all BTH fields.
func (b BTH) Fields() BTHFields {
	return BTHFields{
		Opcode:    b.Opcode(),
		Solicited: b.Solicited(),
		MigReq:    b.MigReq(),
		PadCount:  uint8(b.PadCount()),
		TVer:      b.TVer(),
		PKey:      b.PKey(),
		FECN:      b.FECN(),
		BECN:      b.BECN(),
		DestQP:    b.DestQP(),
		AckReq:    b.AckReq(),
		PSN:       b.PSN(),
	}
}

// SetPSN overwrites the PSN (truncated to 24 bits), keeping the AckReq bit.
func (b BTH) SetPSN(psn uint32) {
	v := binary.BigEndian.Uint32(b[bthPSN:])&^PSNMask | psn&PSNMask
	binary.BigEndian.PutUint32(b[bthPSN:], v)
}

// SetAckReq sets or clears the AckReq bit, keeping the PSN.
func (b BTH) SetAckReq(v bool) {
	if v {
		b[bthAck] |= bthAckReq
	} else {
		b[bthAck] &^= bthAckReq
	}
}

// SetDestQP overwrites the destination QP (truncated to 24 bits), keeping
// the FECN and BECN bits.
func (b BTH) SetDestQP(qp uint32) {
	v := binary.BigEndian.Uint32(b[bthQP:])&^PSNMask | qp&PSNMask
	binary.BigEndian.PutUint32(b[bthQP:], v)
}
