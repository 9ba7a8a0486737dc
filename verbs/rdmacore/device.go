//go:build rdmacore

package rdmacore

// #include <infiniband/verbs.h>
// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
)

// ProviderName is the provider's name in verbs.Device.Provider and the
// verbs provider registry.
const ProviderName = "rdmacore"

// LinkName is what Device.Link reports: RoCEv2 over the device's own
// Ethernet port, the wire soft-RoCE's udp link also speaks.
const LinkName = "roce"

func init() {
	verbs.RegisterProvider(ProviderName, func(ip netip.Addr) (verbs.Device, error) {
		return Open(Config{Addr: ip})
	})
}

// Config selects a device.
type Config struct {
	// Device is the device name (e.g. "rxe0", "mlx5_0"); empty means any.
	Device string
	// Addr is the local IP address whose RoCEv2 GID the device must have
	// on an active port 1. The zero value takes the first RoCEv2 GID of
	// an IPv4 address (else a routable IPv6 one) of the first device with
	// an active port.
	Addr netip.Addr
}

// DeviceInfo describes a device of the host, as DeviceList finds it.
type DeviceInfo struct {
	Name string
	GUID uint64
}

// DeviceList lists the host's RDMA devices. A host without RDMA in its
// kernel (ibv_get_device_list fails with ENOSYS) has none: that is an
// empty list, not an error.
func DeviceList() ([]DeviceInfo, error) {
	var n C.int
	list, err := C.rs_devices(&n)
	if list == nil {
		if e := errnoOf(err); e == 0 || e == syscall.ENOSYS || e == syscall.ENOENT || e == syscall.ENODEV {
			return nil, nil
		}
		return nil, callErr("ibv_get_device_list", errnoOf(err))
	}
	defer C.ibv_free_device_list(list)
	var out []DeviceInfo
	for _, d := range unsafe.Slice(list, int(n)) {
		out = append(out, DeviceInfo{Name: C.GoString(C.ibv_get_device_name(d)), GUID: uint64(C.ibv_get_device_guid(d))})
	}
	return out, nil
}

// Device is an opened rdma-core device (an ibv_context) for one local IP
// address.
type Device struct {
	name string
	ctx  *C.struct_ibv_context
	port verbs.PortAttr
	view gidView

	closed atomic.Bool
	// asyncFile is a duplicate of the async event fd, registered with
	// the poller; closing it ends the event goroutine.
	asyncFile *os.File
	asyncDone sync.WaitGroup
	objMu     sync.Mutex // guards the object sets
	pds       map[*PD]struct{}
	cqs       map[*CQ]struct{}
	closeM    sync.Once
}

var _ verbs.Device = (*Device)(nil)

// Open opens the device cfg selects. When no device fits it returns an
// error wrapping verbs.ErrNoDevice that says what it found.
func Open(cfg Config) (*Device, error) {
	var n C.int
	list, err := C.rs_devices(&n)
	if list == nil {
		if e := errnoOf(err); e == 0 || e == syscall.ENOSYS || e == syscall.ENOENT || e == syscall.ENODEV {
			return nil, fmt.Errorf("rdmacore: ibv_get_device_list: %v: %w", e, verbs.ErrNoRDMA)
		}
		return nil, callErr("ibv_get_device_list", errnoOf(err))
	}
	defer C.ibv_free_device_list(list)
	devs := unsafe.Slice(list, int(n))
	if len(devs) == 0 {
		return nil, fmt.Errorf("rdmacore: %w", verbs.ErrNoRDMA)
	}
	var whys []error
	for _, d := range devs {
		name := C.GoString(C.ibv_get_device_name(d))
		if cfg.Device != "" && name != cfg.Device {
			continue
		}
		dev, err := openOne(d, name, cfg.Addr)
		if err == nil {
			return dev, nil
		}
		whys = append(whys, err)
	}
	if len(whys) == 0 {
		return nil, fmt.Errorf("rdmacore: no device named %q: %w", cfg.Device, verbs.ErrNoDevice)
	}
	return nil, errors.Join(whys...)
}

// openOne opens d when its port 1 is active with a RoCEv2 GID for ip.
func openOne(d *C.struct_ibv_device, name string, ip netip.Addr) (*Device, error) {
	ctx, err := C.ibv_open_device(d)
	if ctx == nil {
		return nil, fmt.Errorf("rdmacore: %s: %w", name, callErr("ibv_open_device", errnoOf(err)))
	}
	ok := false
	defer func() {
		if !ok {
			C.ibv_close_device(ctx)
		}
	}()
	var pa C.struct_rs_port
	if rc := C.rs_query_port(ctx, &pa); rc != 0 {
		return nil, fmt.Errorf("rdmacore: %s: %w", name, callErr("ibv_query_port", syscall.Errno(rc)))
	}
	if verbs.PortState(pa.state) != verbs.PortActive {
		return nil, fmt.Errorf("rdmacore: %s port 1 is %v, not active: %w", name, portStateName(verbs.PortState(pa.state)), verbs.ErrNoDevice)
	}
	if pa.link_layer != C.IBV_LINK_LAYER_ETHERNET {
		return nil, fmt.Errorf("rdmacore: %s port 1 is not Ethernet (RoCE): %w", name, verbs.ErrNoDevice)
	}
	table, err := gidTable(ctx, int(pa.gid_tbl_len))
	if err != nil {
		return nil, fmt.Errorf("rdmacore: %s: %w", name, err)
	}
	chosen, err := chooseGID(table, ip)
	if err != nil {
		return nil, fmt.Errorf("rdmacore: %s: %w", name, err)
	}
	view := newGIDView(table, chosen)
	dev := &Device{
		name: name,
		ctx:  ctx,
		view: view,
		port: verbs.PortAttr{
			State:     verbs.PortActive,
			MaxMTU:    verbs.MTU(pa.max_mtu),
			ActiveMTU: verbs.MTU(pa.active_mtu),
			GIDs:      view.gids,
		},
		pds: make(map[*PD]struct{}),
		cqs: make(map[*CQ]struct{}),
	}
	if err := dev.watchAsync(); err != nil {
		return nil, fmt.Errorf("rdmacore: %s: %w", name, err)
	}
	ok = true
	return dev, nil
}

// gidTable reads port 1's valid GIDs with their types.
func gidTable(ctx *C.struct_ibv_context, n int) ([]gidEntry, error) {
	if n <= 0 {
		return nil, nil
	}
	entries := make([]C.struct_ibv_gid_entry, n)
	got, err := C.rs_gid_table(ctx, &entries[0], C.size_t(n))
	if got < 0 {
		return nil, callErr("ibv_query_gid_table", errnoOf(err))
	}
	var table []gidEntry
	for _, e := range entries[:got] {
		if e.port_num != 1 {
			continue
		}
		var g verbs.GID
		copy(g[:], C.GoBytes(unsafe.Pointer(&e.gid), 16))
		table = append(table, gidEntry{index: int(e.gid_index), gid: g, rocev2: e.gid_type == C.IBV_GID_TYPE_ROCE_V2})
	}
	return table, nil
}

func portStateName(s verbs.PortState) string {
	switch s {
	case verbs.PortDown:
		return "DOWN"
	case verbs.PortInit:
		return "INIT"
	case verbs.PortArmed:
		return "ARMED"
	case verbs.PortActive:
		return "ACTIVE"
	}
	return fmt.Sprintf("state %d", uint8(s))
}

// Name returns the device name, e.g. "rxe0".
func (d *Device) Name() string { return d.name }

// Provider returns "rdmacore".
func (d *Device) Provider() string { return ProviderName }

// Link returns "roce".
func (d *Device) Link() string { return LinkName }

// Port describes port 1: its state when the device was opened and its
// RoCEv2 GIDs, the one of the device's IP address first.
func (d *Device) Port() verbs.PortAttr {
	p := d.port
	p.GIDs = append([]verbs.GID(nil), p.GIDs...)
	if d.closed.Load() {
		p.State = verbs.PortDown
	}
	return p
}

// Counters returns the port's hardware counters where the driver exposes
// them in sysfs (rxe and mlx5 do), else zeros.
func (d *Device) Counters() verbs.Counters { return readCounters(d.name) }

// AllocPD allocates a protection domain.
func (d *Device) AllocPD() (verbs.PD, error) {
	d.objMu.Lock()
	defer d.objMu.Unlock()
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	pd, err := C.ibv_alloc_pd(d.ctx)
	if pd == nil {
		return nil, callErr("ibv_alloc_pd", errnoOf(err))
	}
	p := &PD{dev: d, pd: pd, mrs: make(map[*MR]struct{}), qps: make(map[*QP]struct{})}
	d.pds[p] = struct{}{}
	return p, nil
}

// Close destroys every object of the device and closes it. It is
// idempotent.
func (d *Device) Close() error {
	if d.closed.Swap(true) {
		return nil
	}
	d.objMu.Lock()
	pds, cqs := slices.Collect(maps.Keys(d.pds)), slices.Collect(maps.Keys(d.cqs))
	d.objMu.Unlock()
	var errs []error
	// QPs before the CQs they use, MRs before their PDs.
	for _, p := range pds {
		errs = append(errs, p.closeChildren())
	}
	for _, c := range cqs {
		errs = append(errs, c.Close())
	}
	for _, p := range pds {
		errs = append(errs, p.Close())
	}
	d.stopAsync()
	if rc, err := C.ibv_close_device(d.ctx); rc != 0 {
		errs = append(errs, callErr("ibv_close_device", errnoOf(err)))
	}
	return errors.Join(errs...)
}
