//go:build !linux

package netconn

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/fallback"
	"github.com/rsock-go/rsock/rsock"
)

// errNoMemif is why memif is not set up on this system.
var errNoMemif = errors.New("memif needs Linux (memfd, eventfd, abstract sockets)")

// memifOffer is never made here.
type memifOffer struct{ socket, secret string }

func memifSupported() error { return errNoMemif }

func newMemifOffer(net.Conn, netip.Addr, time.Time) (*memifOffer, error) { return nil, errNoMemif }

func (o *memifOffer) close() {}

func acceptOffer(*memifOffer, time.Time, netip.Addr, rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	releaseMemif()
	return nil, nil, errNoMemif
}

func connectOffer(net.Conn, *fallback.Hello, time.Time, netip.Addr, rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	releaseMemif()
	return nil, nil, errNoMemif
}

func openWireDevice(deviceKey, string) (*sharedDevice, error) { return nil, errNoMemif }
