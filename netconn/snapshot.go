package netconn

import (
	"cmp"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
)

// State is the process-wide state of rsock: every device with its
// counters and conns, the conns on TCP, and the fallbacks so far.
type State struct {
	// Devices are the RDMA devices open now, by name.
	Devices []DeviceState `json:"devices"`
	// TCPConns are the open conns on TCP: fallbacks (with a reason) and
	// plain clients of a listener or plain dialers (without).
	TCPConns []ConnStats `json:"tcp_conns"`
	// RegisteredBytes is the memory registered on all devices.
	RegisteredBytes uint64 `json:"registered_bytes"`
	// Fallbacks counts the conns since the start of the process that tried
	// RDMA and went to TCP, by kind (see FallbackKinds).
	Fallbacks map[string]uint64 `json:"fallbacks"`
	// PendingHandshakes is the number of listeners' rsock handshakes in
	// progress.
	PendingHandshakes int64 `json:"pending_handshakes"`
	// HandshakeFailures counts handshakes that ended without a conn;
	// ConnErrors conns whose reads or writes failed (other than by EOF, a
	// deadline or Close).
	HandshakeFailures uint64 `json:"handshake_failures"`
	ConnErrors        uint64 `json:"conn_errors"`
	// Capture counts the packets of the RSOCK_PCAP file, if any.
	Capture softroce.CaptureStats `json:"capture"`
}

// DeviceState is one device in a State.
type DeviceState struct {
	Name     string `json:"name"`
	Provider string `json:"provider"`
	Link     string `json:"link"`
	// Counters are the device's statistics (verbs.Device.Counters).
	Counters verbs.Counters `json:"counters"`
	// RegisteredBytes is the memory registered on the device.
	RegisteredBytes uint64 `json:"registered_bytes"`
	// Conns are the open conns on the device.
	Conns []ConnStats `json:"conns"`
}

// ExpvarName is the name to publish Snapshot under through expvar, as
// rsockbench does and reads back ("rsockbench stat"). This package
// publishes nothing itself and does not import expvar (whose import serves
// /debug/vars on http.DefaultServeMux); the snapshot names addresses and
// queue pairs, so serve it only where that is private:
//
//	expvar.Publish(netconn.ExpvarName, expvar.Func(func() any { return netconn.Snapshot() }))
//
// or serve package metrics' JSONHandler on a private mux.
const ExpvarName = "rsock"

var (
	fallbackCounts    [10]atomic.Uint64 // by index in FallbackKinds
	pendingHandshakes atomic.Int64
	handshakeFailures atomic.Uint64
	connErrors        atomic.Uint64
)

// conns are the open conns of the process. A conn enters when made and
// leaves when closed.
var conns = struct {
	sync.Mutex
	m map[*Conn]struct{}
}{m: make(map[*Conn]struct{})}

func register(c *Conn) *Conn {
	conns.Lock()
	conns.m[c] = struct{}{}
	conns.Unlock()
	return c
}

func unregister(c *Conn) {
	conns.Lock()
	delete(conns.m, c)
	conns.Unlock()
}

// noteEstablished counts and logs a conn handed to the user, by Dial or
// Accept, if it fell back to TCP.
func noteEstablished(c *Conn, side string) {
	if c.stream != nil || c.fallback == nil {
		return
	}
	k := kindIndex(c.fallback.Kind)
	fallbackCounts[k].Add(1)
	logFallback(c, side, FallbackKinds[k])
}

// Snapshot returns the process-wide state of rsock. It allocates, and
// is meant for monitoring (a few times a second at most); Conn.Stats is
// the cheap per-conn call.
func Snapshot() State {
	// Devices of the registry (also idle ones waiting to close), then the
	// conns, whose private (memif) devices are not in the registry. The
	// shm channels are devices too.
	registry.Lock()
	var devs []*sharedDevice
	for _, ds := range registry.devs {
		devs = append(devs, ds...)
	}
	registry.Unlock()
	devs = append(devs, shmDevices()...)
	conns.Lock()
	cs := make([]*Conn, 0, len(conns.m))
	for c := range conns.m {
		cs = append(cs, c)
	}
	conns.Unlock()

	snap := State{
		Fallbacks:         make(map[string]uint64, len(FallbackKinds)),
		PendingHandshakes: pendingHandshakes.Load(),
		HandshakeFailures: handshakeFailures.Load(),
		ConnErrors:        connErrors.Load(),
		Capture:           captureStats(),
		TCPConns:          []ConnStats{},
	}
	for i, k := range FallbackKinds {
		snap.Fallbacks[k] = fallbackCounts[i].Load()
	}
	byDev := make(map[*sharedDevice][]ConnStats)
	for _, c := range cs {
		st := c.Stats()
		if c.dev == nil {
			snap.TCPConns = append(snap.TCPConns, st)
			continue
		}
		if _, ok := byDev[c.dev]; !ok && !slices.Contains(devs, c.dev) {
			devs = append(devs, c.dev)
		}
		byDev[c.dev] = append(byDev[c.dev], st)
	}
	for _, d := range devs {
		ds := DeviceState{
			Name:     d.dev.Name(),
			Provider: d.dev.Provider(),
			Link:     d.dev.Link(),
			Counters: d.dev.Counters(),
			Conns:    byDev[d],
		}
		if ds.Conns == nil {
			ds.Conns = []ConnStats{}
		}
		if r, ok := d.dev.(verbs.RegisteredBytes); ok {
			ds.RegisteredBytes = r.RegisteredBytes()
		}
		snap.RegisteredBytes += ds.RegisteredBytes
		sortConns(ds.Conns)
		snap.Devices = append(snap.Devices, ds)
	}
	if snap.Devices == nil {
		snap.Devices = []DeviceState{}
	}
	slices.SortFunc(snap.Devices, func(a, b DeviceState) int { return cmp.Compare(a.Name, b.Name) })
	sortConns(snap.TCPConns)
	return snap
}

// sortConns orders conns by local, then remote address.
func sortConns(cs []ConnStats) {
	slices.SortFunc(cs, func(a, b ConnStats) int {
		if c := a.Local.Compare(b.Local); c != 0 {
			return c
		}
		return a.Remote.Compare(b.Remote)
	})
}
