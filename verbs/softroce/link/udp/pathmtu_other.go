//go:build !linux

package udp

import (
	"errors"
	"net/netip"
)

// RouteMTU is not available on this platform; callers use InterfaceMTU.
func RouteMTU(local, remote netip.Addr) (int, error) {
	return 0, errors.New("udp: route MTU lookup needs Linux")
}

// LearnedPathMTU is not available on this platform.
func LearnedPathMTU(local, remote netip.Addr) (int, error) {
	return 0, errors.New("udp: path MTU lookup needs Linux")
}
