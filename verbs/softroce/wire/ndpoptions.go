package wire

// Neighbour discovery option types (RFC 4861 4.6).
const (
	NDPOptionSourceLinkLayer = 1
	NDPOptionTargetLinkLayer = 2
)

// NDPLinkLayerOptionLen is the length of a link-layer address option
// for Ethernet: type, length (1, in units of 8 bytes) and the MAC.
const NDPLinkLayerOptionLen = 8

// NDPOptions is a view of the options of a neighbour discovery message,
// which run to the end of the slice:
//
//	byte 0        type
//	byte 1        length of the option in units of 8 bytes (never 0)
//	bytes 2-      the option's data
//
// All methods accept any length.
type NDPOptions []byte

// IsValid reports whether the options fill the slice exactly, none of
// them of length 0 (which RFC 4861 says to discard the message for).
func (o NDPOptions) IsValid() bool {
	for len(o) > 0 {
		if len(o) < 2 || o[1] == 0 || int(o[1])*8 > len(o) {
			return false
		}
		o = o[int(o[1])*8:]
	}
	return true
}

// LinkLayerAddress returns the Ethernet address of the first option of
// type typ (NDPOptionSourceLinkLayer or NDPOptionTargetLinkLayer), and
// false if there is none, or the options are not valid.
func (o NDPOptions) LinkLayerAddress(typ uint8) (MAC, bool) {
	if !o.IsValid() {
		return MAC{}, false
	}
	for ; len(o) > 0; o = o[int(o[1])*8:] {
		if o[0] == typ && o[1] == 1 {
			return MAC(o[2:8]), true
		}
	}
	return MAC{}, false
}

// EncodeLinkLayer writes a link-layer address option of type typ
// carrying mac into the first NDPLinkLayerOptionLen bytes of o.
func (o NDPOptions) EncodeLinkLayer(typ uint8, mac MAC) {
	_ = o[NDPLinkLayerOptionLen-1]
	o[0], o[1] = typ, 1
	copy(o[2:8], mac[:])
}
