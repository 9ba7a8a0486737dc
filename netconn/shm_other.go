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

var errShmUnsupported = errors.New("shm runs on Linux only")

func (shmOps) available() error { return errShmUnsupported }

func (shmOps) offer(net.Conn, *fallback.Hello, netip.Addr, time.Time) (pendingOffer, error) {
	return nil, errShmUnsupported
}

func (shmOps) connect(net.Conn, *fallback.Hello, netip.Addr, time.Time, rsock.Config) (*sharedDevice, *rsock.Endpoint, error) {
	return nil, nil, errShmUnsupported
}

func closeIdleShmChannels() {}

func shmDevices() []*sharedDevice { return nil }
