package link

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// OpenConfig is what a registered link is opened with. Links that have
// their own addressing (a DPDK port configured through its knobs) may
// ignore it.
type OpenConfig struct {
	// Addr is the local IP address the caller would use, or the zero
	// Addr.
	Addr netip.Addr
}

// Opener opens a registered link.
type Opener func(OpenConfig) (Link, error)

var links = struct {
	sync.Mutex
	m map[string]Opener
}{m: make(map[string]Opener)}

// Register makes a link type available by name to code that does not
// import it: a link package behind a build tag (dpdk) registers itself in
// its init function. It panics if the name is taken, as a programming
// error.
func Register(name string, open Opener) {
	links.Lock()
	defer links.Unlock()
	if _, dup := links.m[name]; dup {
		panic(fmt.Sprintf("link: %q registered twice", name))
	}
	links.m[name] = open
}

// NetworkFunc reports the network a link's own addresses are configured
// on, apart from the kernel's (a DPDK port's address and prefix), and
// false when the link is not configured.
type NetworkFunc func() (netip.Prefix, bool)

var networks = struct {
	sync.Mutex
	m map[string]NetworkFunc
}{m: make(map[string]NetworkFunc)}

// RegisterNetwork registers, for a link registered as name whose
// addresses are configured apart from the kernel's, where to find its
// network: peers on it are reached through the link, so a handshake may
// name them although they are not the TCP peer's address.
func RegisterNetwork(name string, f NetworkFunc) {
	networks.Lock()
	defer networks.Unlock()
	networks.m[name] = f
}

// Network returns the network of the link registered as name, if it has
// one and is configured.
func Network(name string) (netip.Prefix, bool) {
	networks.Lock()
	f, ok := networks.m[name]
	networks.Unlock()
	if !ok {
		return netip.Prefix{}, false
	}
	return f()
}

// Lookup returns the opener of the link registered as name.
func Lookup(name string) (Opener, bool) {
	links.Lock()
	defer links.Unlock()
	open, ok := links.m[name]
	return open, ok
}

// Registered returns the names of the registered links, sorted.
func Registered() []string {
	links.Lock()
	defer links.Unlock()
	names := make([]string, 0, len(links.m))
	for n := range links.m {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}
