//go:build !linux

package udp

import (
	"errors"
	"net/netip"

	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// errUnsupported is returned by Listen on systems other than Linux.
var errUnsupported = errors.New("udp: the udp link is implemented on Linux only")

// Link is a link.Link over a kernel UDP socket. It is implemented on Linux
// only; elsewhere Listen returns an error.
type Link struct{}

var _ link.Link = (*Link)(nil)

// Listen returns an error: the udp link is implemented on Linux only.
func Listen(cfg Config) (*Link, error) { return nil, errUnsupported }

// Name returns "udp".
func (l *Link) Name() string { return "udp" }

// LocalAddr returns the zero address.
func (l *Link) LocalAddr() netip.AddrPort { return netip.AddrPort{} }

// BufferSizes returns an error.
func (l *Link) BufferSizes() (recv, send int, err error) { return 0, 0, errUnsupported }

// Offloads reports false, false.
func (l *Link) Offloads() (gso, gro bool) { return false, false }

// Send returns an error.
func (l *Link) Send(pkts []link.Packet) error { return errUnsupported }

// Recv returns an error.
func (l *Link) Recv(pkts []link.Packet) (int, error) { return 0, errUnsupported }

// Close does nothing.
func (l *Link) Close() error { return nil }
