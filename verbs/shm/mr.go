//go:build linux

package shm

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs"
)

// PD is a protection domain. The peer reaches only memory regions with
// remote access, and only through queue pairs of the same PD.
type PD struct {
	dev  *Device
	id   uint32
	refs atomic.Int32 // MRs and QPs
}

var _ verbs.PD = (*PD)(nil)

// Close deallocates the PD; ErrBusy while MRs or QPs use it.
func (p *PD) Close() error {
	if p.refs.Load() != 0 {
		return verbs.ErrBusy
	}
	return nil
}

const remoteAccess = verbs.AccessRemoteWrite | verbs.AccessRemoteRead | verbs.AccessRemoteAtomic

// MR is a registered memory region. One with remote access lives in a
// sealed memfd, mapped in place of the caller's pages, that the peer
// maps too.
type MR struct {
	pd         *PD
	buf        []byte
	addr       uint64
	lkey, rkey uint32
	access     verbs.Access
	shared     []byte // the page-rounded span mapped from the memfd
	closeOnce  sync.Once
	closeErr   error
}

var (
	_ verbs.MR            = (*MR)(nil)
	_ verbs.DiscardCloser = (*MR)(nil)
)

// RegMR registers buf. With remote access buf must lie in memory from
// verbs.AllocBuffer: its pages are moved, contents and address unchanged,
// into a sealed memfd that the peer maps (the rest of buf's last page
// goes with it).
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	d := p.dev
	if len(buf) == 0 || access&^(verbs.AccessLocalWrite|remoteAccess) != 0 {
		return nil, fmt.Errorf("shm: register %d bytes with access %#x: %w", len(buf), access, verbs.ErrInvalidArgument)
	}
	if err := d.deadErr(); err != nil {
		return nil, fmt.Errorf("shm: register: %w", err)
	}
	m := &MR{pd: p, buf: buf, addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), lkey: randKey(), access: access}
	if access&remoteAccess != 0 {
		if err := m.share(); err != nil {
			return nil, err
		}
	}
	d.mrMu.Lock()
	for d.mrs[m.lkey] != nil {
		m.lkey = randKey()
	}
	d.mrs[m.lkey] = m
	d.mrMu.Unlock()
	p.refs.Add(1)
	return m, nil
}

// share moves the MR's pages into a memfd and sends it to the peer.
func (m *MR) share() error {
	start, n, ok := verbs.BufferSpan(m.buf)
	p := uintptr(m.addr)
	if !ok || p%pageSize != 0 {
		return fmt.Errorf("shm: an MR with remote access must start a page of memory from verbs.AllocBuffer: %w", verbs.ErrInvalidArgument)
	}
	plen := (len(m.buf) + pageSize - 1) / pageSize * pageSize
	if uintptr(plen) > start+uintptr(n)-p {
		return fmt.Errorf("shm: MR's last page is not inside its buffer: %w", verbs.ErrInvalidArgument)
	}
	span := unsafe.Slice(&m.buf[0], plen)
	fd, err := newMemfd("rsock-shm-mr", plen, span)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	if _, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&span[0]), uintptr(plen), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED); err != nil {
		return fmt.Errorf("shm: map MR memfd in place: %w", err)
	}
	m.shared = span
	m.rkey = randKey()
	err = m.pd.dev.send(&msg{typ: msgMRNew, a: m.rkey, b: m.pd.id, c: uint32(m.access), x: m.addr, y: uint64(len(m.buf))}, fd)
	if err != nil {
		m.unshare(false)
		return err
	}
	return nil
}

// unshare puts private pages back in place of the memfd's, with the same
// contents unless discard: whatever the peer writes later lands in its
// own mapping only.
func (m *MR) unshare(discard bool) error {
	var saved []byte
	if !discard {
		saved = make([]byte, len(m.shared))
		copy(saved, m.shared)
	}
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&m.shared[0]), uintptr(len(m.shared)), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("shm: unmap MR memfd: %w", err)
	}
	copy(m.shared, saved)
	m.shared = nil
	return nil
}

// Buf returns the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Addr returns the address of Buf()[0].
func (m *MR) Addr() uint64 { return m.addr }

// LKey returns the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey returns the remote key (zero without remote access).
func (m *MR) RKey() uint32 { return m.rkey }

// Access returns the access flags.
func (m *MR) Access() verbs.Access { return m.access }

func (m *MR) contains(addr uint64, n uint32) bool {
	return addr >= m.addr && addr-m.addr <= uint64(len(m.buf)) && uint64(n) <= uint64(len(m.buf))-(addr-m.addr)
}

// slice returns the bytes [addr, addr+n) of the MR, or false.
func (m *MR) slice(addr uint64, n uint32) ([]byte, bool) {
	if !m.contains(addr, n) {
		return nil, false
	}
	off := addr - m.addr
	return m.buf[off : off+uint64(n)], true
}

// Close deregisters the MR: the peer is told, and the caller's pages are
// private again, contents kept. It is idempotent.
func (m *MR) Close() error { return m.close(false) }

// CloseDiscard deregisters the MR as Close does, but leaves its memory
// zeroed instead of copying the contents back (verbs.DiscardCloser): for
// callers about to free it.
func (m *MR) CloseDiscard() error { return m.close(true) }

func (m *MR) close(discard bool) error {
	m.closeOnce.Do(func() {
		d := m.pd.dev
		d.mrMu.Lock()
		if d.mrs[m.lkey] == m {
			delete(d.mrs, m.lkey)
		}
		d.mrMu.Unlock()
		if m.shared != nil {
			if d.deadErr() == nil {
				d.send(&msg{typ: msgMRGone, a: m.rkey}, -1) // a failure ends the channel anyway
			}
			m.closeErr = m.unshare(discard)
		}
		m.pd.refs.Add(-1)
	})
	return m.closeErr
}

// remoteMR is a memory region of the peer, mapped here.
type remoteMR struct {
	pin
	rkey, pd     uint32
	access       verbs.Access
	addr, length uint64
	mem          []byte
}

// mapRemote maps the peer's region from fd: read-only unless the peer
// allows remote writes or atomics.
func mapRemote(fd int, rkey, pd uint32, access verbs.Access, addr, length uint64) (*remoteMR, error) {
	plen := (length + pageSize - 1) / pageSize * pageSize
	if err := checkMemfd(fd, plen); err != nil {
		return nil, err
	}
	prot := unix.PROT_READ
	if access&(verbs.AccessRemoteWrite|verbs.AccessRemoteAtomic) != 0 {
		prot |= unix.PROT_WRITE
	}
	mem, err := unix.Mmap(fd, 0, int(plen), prot, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shm: map the peer's region of %d bytes: %w", length, err)
	}
	r := &remoteMR{rkey: rkey, pd: pd, access: access, addr: addr, length: length, mem: mem[:length]}
	r.free = func() { unix.Munmap(mem) }
	return r, nil
}

// span returns the bytes [addr, addr+n) of the region, or false.
func (r *remoteMR) span(addr uint64, n uint32) ([]byte, bool) {
	if addr < r.addr || addr-r.addr > r.length || uint64(n) > r.length-(addr-r.addr) {
		return nil, false
	}
	off := addr - r.addr
	return r.mem[off : off+uint64(n)], true
}
