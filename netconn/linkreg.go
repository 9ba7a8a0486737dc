package netconn

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
	"github.com/rsock-go/rsock/verbs/softroce/link"
)

// Links behind build tags.
//
// A link that a build tag compiles in (dpdk) registers itself by name
// with link.Register; netconn never imports it. RSOCK_LINK (or the Link
// field) may name such a link when the binary has it: the process then
// opens one device on it, which all its RDMA connections share, and
// which is configured by the link's own knobs (RSOCK_DPDK_*), not by the
// connection's IP.

// LinkDPDK uses a DPDK port (soft-RoCE over DPDK), in binaries built
// with -tags dpdk that import verbs/softroce/link/dpdk.
const LinkDPDK = "dpdk"

// checkRegistered accepts a link name that is not built in when a link
// of that name is registered.
func checkRegistered(name string) error {
	if _, ok := link.Lookup(name); ok {
		return nil
	}
	if name == LinkDPDK {
		return errors.New("netconn: the dpdk link is not in this binary: build it with -tags dpdk and import github.com/rsock-go/rsock/verbs/softroce/link/dpdk")
	}
	return fmt.Errorf("netconn: unknown link %q (want auto, udp, memif or a registered link)", name)
}

// registered reports whether name is a registered link rather than a
// built-in one.
func registered(name string) bool {
	switch name {
	case LinkAuto, LinkUDP, LinkMemif, "":
		return false
	}
	_, ok := link.Lookup(name)
	return ok
}

// openRegisteredDevice opens the process's device on a registered link.
// Its MTU is the port's.
func openRegisteredDevice(key deviceKey) (*sharedDevice, error) {
	open, _ := link.Lookup(key.link)
	l, err := open(link.OpenConfig{})
	if err != nil {
		return nil, fmt.Errorf("netconn: %s link: %w", key.link, err)
	}
	mtu := verbs.MTU4096
	if m, ok := l.(interface{ MTU() int }); ok {
		if dm, err := softroce.MTUForIP(m.MTU(), !l.LocalAddr().Addr().Is4()); err == nil {
			mtu = dm
		}
	}
	name := fmt.Sprintf("softroce%d-%s", devicesOpened.Add(1)-1, key.link)
	return newDevice(key, name, l, mtu)
}

// CloseIdleDevices closes at once the devices that no connection uses
// (instead of after their linger time), so that a program about to exit
// releases them: a DPDK port cleans its environment up only when it
// closes.
func CloseIdleDevices() {
	registry.Lock()
	var idle []*sharedDevice
	for _, devs := range registry.devs {
		for _, d := range devs {
			if d.refs == 0 {
				idle = append(idle, d)
			}
		}
	}
	for _, d := range idle {
		if d.timer != nil {
			d.timer.Stop()
			d.timer = nil
		}
		removeLocked(d)
	}
	registry.Unlock()
	for _, d := range idle {
		d.dev.Close()
	}
}

// deviceIP is the IP a device of link is keyed by: none for a registered
// link, which has its own address.
func deviceIP(linkName string, ip netip.Addr) netip.Addr {
	if registered(linkName) {
		return netip.Addr{}
	}
	return ip.Unmap()
}
