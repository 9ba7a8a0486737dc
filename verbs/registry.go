package verbs

import (
	"fmt"
	"net/netip"
	"slices"
	"sync"
)

// OpenFunc opens a provider's device for the local IP address ip: one
// whose port is active and has a RoCEv2 GID for ip. It returns an error
// wrapping ErrNoDevice when the host has no such device.
type OpenFunc func(ip netip.Addr) (Device, error)

var providers struct {
	sync.RWMutex
	open map[string]OpenFunc
}

// RegisterProvider makes a provider that is built into the binary (behind
// a build tag) available by name, so that packages such as netconn can
// use it without importing it. Providers call it from init. It panics on
// an empty name, a nil open or a second registration of a name, as
// database/sql.Register does: those are programming errors.
func RegisterProvider(name string, open OpenFunc) {
	if name == "" || open == nil {
		panic("verbs: RegisterProvider with an empty name or a nil open function")
	}
	providers.Lock()
	defer providers.Unlock()
	if providers.open == nil {
		providers.open = make(map[string]OpenFunc)
	}
	if _, dup := providers.open[name]; dup {
		panic(fmt.Sprintf("verbs: provider %q registered twice", name))
	}
	providers.open[name] = open
}

// LookupProvider returns the open function of a registered provider.
func LookupProvider(name string) (OpenFunc, bool) {
	providers.RLock()
	defer providers.RUnlock()
	open, ok := providers.open[name]
	return open, ok
}

// Providers lists the registered providers' names, sorted.
func Providers() []string {
	providers.RLock()
	defer providers.RUnlock()
	names := make([]string, 0, len(providers.open))
	for n := range providers.open {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// ErrNoRDMA is the error of a provider's open function on a host that has
// no RDMA device at all, or no RDMA support in its kernel (where
// libibverbs' device list fails with ENOSYS): the usual case on a plain
// host, which callers may keep quiet about. It matches ErrNoDevice too.
var ErrNoRDMA error = noRDMA{}

type noRDMA struct{}

func (noRDMA) Error() string        { return "verbs: the host has no RDMA devices" }
func (noRDMA) Is(target error) bool { return target == ErrNoDevice }
