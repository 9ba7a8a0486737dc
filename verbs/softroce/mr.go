package softroce

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
)

// PD is a soft-RoCE protection domain.
type PD struct {
	dev  *Device
	refs atomic.Int64 // MRs and QPs that use it
	dead atomic.Bool
}

var _ verbs.PD = (*PD)(nil)

// Close deallocates the PD; it fails with ErrBusy while MRs or QPs use it.
func (p *PD) Close() error {
	if p.refs.Load() != 0 {
		return verbs.ErrBusy
	}
	p.dead.Store(true)
	return nil
}

// MR is a soft-RoCE memory region.
type MR struct {
	dev    *Device
	pd     *PD
	buf    []byte
	addr   uint64
	lkey   uint32
	rkey   uint32
	access verbs.Access
	dead   bool // guarded by dev.mrMu
	// sending counts packets built and not yet sent whose payload is
	// this region's memory (link.Packet.Tail); Close waits for them.
	sending atomic.Int64
}

var _ verbs.MR = (*MR)(nil)

// RegMR registers buf. Remote write and remote atomic access also need
// local write access, as in libibverbs.
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	d := p.dev
	if len(buf) == 0 {
		return nil, fmt.Errorf("softroce: empty MR: %w", verbs.ErrInvalidArgument)
	}
	const known = verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic
	if access&^known != 0 {
		return nil, fmt.Errorf("softroce: access %#x: %w", uint32(access), verbs.ErrInvalidArgument)
	}
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 && !access.Has(verbs.AccessLocalWrite) {
		return nil, fmt.Errorf("softroce: remote write or atomic access needs local write: %w", verbs.ErrInvalidArgument)
	}
	if p.dead.Load() {
		return nil, verbs.ErrClosed
	}
	m := &MR{dev: d, pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), access: access}
	d.mrMu.Lock()
	defer d.mrMu.Unlock()
	if d.closed.Load() {
		return nil, verbs.ErrClosed
	}
	m.lkey = d.newKeyLocked(d.lkeys)
	m.rkey = d.newKeyLocked(d.rkeys)
	d.lkeys[m.lkey] = m
	d.rkeys[m.rkey] = m
	p.refs.Add(1)
	return m, nil
}

// newKeyLocked returns an unpredictable, unused, non-zero key.
func (d *Device) newKeyLocked(used map[uint32]*MR) uint32 {
	var b [4]byte
	for {
		if _, err := rand.Read(b[:]); err != nil {
			panic("softroce: crypto/rand failed: " + err.Error())
		}
		k := binary.LittleEndian.Uint32(b[:])
		if _, taken := used[k]; k != 0 && !taken {
			return k
		}
	}
}

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Addr returns the virtual address of Buf()[0].
func (m *MR) Addr() uint64 { return m.addr }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// Access returns the access flags.
func (m *MR) Access() verbs.Access { return m.access }

// Close deregisters the region. Device accesses hold the MR table's read
// lock, so none is in progress when Close returns.
func (m *MR) Close() error {
	d := m.dev
	d.mrMu.Lock()
	if m.dead {
		d.mrMu.Unlock()
		return nil
	}
	m.dead = true
	delete(d.lkeys, m.lkey)
	delete(d.rkeys, m.rkey)
	m.pd.refs.Add(-1)
	d.mrMu.Unlock()
	// No packet can take the region's memory now; those that did are
	// sent or dropped within a link's send time. Once Close returns the
	// memory may be unmapped.
	for m.sending.Load() > 0 {
		time.Sleep(20 * time.Microsecond)
	}
	return nil
}

// span returns the bytes [va, va+n) of the region, or false when they are
// not all inside it. The caller holds dev.mrMu.
func (m *MR) span(va uint64, n uint64) ([]byte, bool) {
	if va < m.addr {
		return nil, false
	}
	off := va - m.addr
	if off > uint64(len(m.buf)) || n > uint64(len(m.buf))-off {
		return nil, false
	}
	return m.buf[off : off+n], true
}
