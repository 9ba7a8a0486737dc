//go:build linux

package memif

// Connect is a view of a CONNECT body (client: all regions and rings are
// added) or a CONNECTED body (server: the interface is up). Both carry the
// sender's interface name, NameLen bytes NUL-padded. Methods require
// len(c) >= NameLen.
type Connect []byte

// IfName returns the interface name.
func (c Connect) IfName() string { return cString(c[:NameLen]) }

// Encode writes the interface name, truncated to NameLen-1 bytes.
func (c Connect) Encode(ifName string) { putCString(c[:NameLen], ifName) }
