package netconn

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link/udp"
)

// Devices are shared by every connection of the process that uses the
// same provider, link and local IP, the way a NIC is: a soft-RoCE device
// binds UDP 4791 (or an ephemeral port) on that IP. A device is closed
// when no connection has used it for deviceLinger.
var deviceLinger = 5 * time.Second

type deviceKey struct {
	provider, link string
	ip             netip.Addr
}

type sharedDevice struct {
	key   deviceKey
	dev   verbs.Device
	pd    verbs.PD
	refs  int
	timer *time.Timer
}

var registry = struct {
	sync.Mutex
	devs map[deviceKey]*sharedDevice
}{devs: make(map[deviceKey]*sharedDevice)}

// errNoRDMACore is the provider failure when rdma-core support is not
// compiled in.
var errNoRDMACore = errors.New("netconn: the rdmacore provider is not built into this binary")

// acquireDevice returns the shared device for a provider choice and local
// IP, opening it if needed. Release it with releaseDevice.
func acquireDevice(provider, link string, ip netip.Addr) (*sharedDevice, error) {
	switch provider {
	case ProviderAuto:
		provider = ProviderSoftRoCE
	case ProviderRDMACore:
		return nil, errNoRDMACore
	}
	key := deviceKey{provider, link, ip.Unmap()}
	registry.Lock()
	defer registry.Unlock()
	if d := registry.devs[key]; d != nil {
		if d.timer != nil {
			d.timer.Stop()
			d.timer = nil
		}
		d.refs++
		return d, nil
	}
	l, err := udp.Listen(udp.Config{Addr: netip.AddrPortFrom(key.ip, 0)})
	if err != nil {
		return nil, fmt.Errorf("netconn: soft-RoCE link on %v: %w", key.ip, err)
	}
	dev, err := softroce.Open(softroce.Config{Name: "softroce-" + key.ip.String(), Link: l, AckDelay: streamAckDelay})
	if err != nil {
		l.Close()
		return nil, err
	}
	pd, err := dev.AllocPD()
	if err != nil {
		dev.Close()
		return nil, err
	}
	d := &sharedDevice{key: key, dev: dev, pd: pd, refs: 1}
	registry.devs[key] = d
	return d, nil
}

// releaseDevice drops a reference; the last one closes the device after
// deviceLinger.
func releaseDevice(d *sharedDevice) {
	registry.Lock()
	defer registry.Unlock()
	d.refs--
	if d.refs > 0 {
		return
	}
	if deviceLinger <= 0 {
		closeDeviceLocked(d)
		return
	}
	d.timer = time.AfterFunc(deviceLinger, func() {
		registry.Lock()
		defer registry.Unlock()
		if d.refs == 0 && registry.devs[d.key] == d {
			closeDeviceLocked(d)
		}
	})
}

func closeDeviceLocked(d *sharedDevice) {
	delete(registry.devs, d.key)
	d.dev.Close()
}

// transport names the path of a device, e.g. "rdma/softroce/udp".
func (d *sharedDevice) transport() string {
	return "rdma/" + d.dev.Provider() + "/" + d.dev.Link()
}

// streamAckDelay lets the devices of rsock streams hold an ACK briefly:
// a stream's writer never waits on the completion of one small WRITE (its
// send ring has room for many), so request/response traffic saves an ACK
// packet and a wake-up of the peer per message. It is well below any ACK
// timeout, and Close sends an ACK still held.
const streamAckDelay = 200 * time.Microsecond
