//go:build linux

package memif

import "encoding/binary"

// Init is a view of an INIT body, the client's first message, naming the
// interface it wants and proving it may have it:
//
//	bytes 0-1   protocol version
//	bytes 2-5   interface id
//	byte 6      interface mode (ModeEthernet)
//	bytes 7-30  secret (NUL-padded)
//	bytes 31-62 name (NUL-padded)
//
// Methods require len(i) >= InitLen.
type Init []byte

// InitLen is the length of an INIT body.
const InitLen = 63

// Interface modes.
const (
	// ModeEthernet carries Ethernet frames, the only mode this package
	// (and DPDK) supports.
	ModeEthernet = 0
	// ModeIP carries IP packets.
	ModeIP = 1
	// ModePuntInject is VPP's punt/inject mode.
	ModePuntInject = 2
)

// InitFields holds the fields of an INIT.
type InitFields struct {
	Version uint16
	ID      uint32
	Mode    uint8
	// Secret is truncated to SecretLen-1 bytes by Encode.
	Secret string
	Name   string
}

// Version returns the protocol version the client speaks.
func (i Init) Version() uint16 { return binary.LittleEndian.Uint16(i[0:]) }

// ID returns the interface id.
func (i Init) ID() uint32 { return binary.LittleEndian.Uint32(i[2:]) }

// Mode returns the interface mode.
func (i Init) Mode() uint8 { return i[6] }

// SecretBytes returns the raw secret field (SecretLen bytes).
func (i Init) SecretBytes() []byte { return i[7 : 7+SecretLen] }

// Secret returns the secret up to its first NUL.
func (i Init) Secret() string { return cString(i.SecretBytes()) }

// Name returns the client's name.
func (i Init) Name() string { return cString(i[31 : 31+NameLen]) }

// Fields returns all fields.
func (i Init) Fields() InitFields {
	return InitFields{i.Version(), i.ID(), i.Mode(), i.Secret(), i.Name()}
}

// Encode writes all fields.
func (i Init) Encode(f *InitFields) {
	_ = i[InitLen-1]
	binary.LittleEndian.PutUint16(i[0:], f.Version)
	binary.LittleEndian.PutUint32(i[2:], f.ID)
	i[6] = f.Mode
	putCString(i[7:7+SecretLen], f.Secret)
	putCString(i[31:31+NameLen], f.Name)
}
