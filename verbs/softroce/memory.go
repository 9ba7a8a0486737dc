package softroce

import (
	"sync/atomic"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
)

// Every access to registered memory goes through this file, under the MR
// table's read lock, so that MR.Close waits for accesses in progress.

// gather copies len(dst) bytes of the scatter/gather list, starting off
// bytes into it, into dst. It reports false if an SGE's key, PD or bounds
// are wrong.
func (d *Device) gather(pd *PD, sgl []verbs.SGE, off uint64, dst []byte) bool {
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	return d.walkSGL(pd, sgl, off, uint64(len(dst)), 0, func(mem []byte) {
		n := copy(dst, mem)
		dst = dst[n:]
	})
}

// span returns the registered memory backing bytes [off, off+n) of sgl
// and its region, if one SGE holds them all and the region may be read;
// else nil.
func (d *Device) span(pd *PD, sgl []verbs.SGE, off, n uint64) ([]byte, *MR) {
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	for i := range sgl {
		s := &sgl[i]
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		if n > l-off {
			return nil, nil
		}
		m := d.lkeys[s.LKey]
		if m == nil || m.pd != pd {
			return nil, nil
		}
		mem, ok := m.span(s.Addr+off, n)
		if !ok {
			return nil, nil
		}
		return mem, m
	}
	return nil, nil
}

// scatter copies src into the scatter/gather list, starting off bytes into
// it. Every MR written needs local write access.
func (d *Device) scatter(pd *PD, sgl []verbs.SGE, off uint64, src []byte) bool {
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	return d.walkSGL(pd, sgl, off, uint64(len(src)), verbs.AccessLocalWrite, func(mem []byte) {
		n := copy(mem, src)
		src = src[n:]
	})
}

// walkSGL calls fn on the registered memory backing bytes [off, off+n) of
// sgl, in order. The caller holds mrMu.
func (d *Device) walkSGL(pd *PD, sgl []verbs.SGE, off, n uint64, need verbs.Access, fn func([]byte)) bool {
	for i := range sgl {
		if n == 0 {
			return true
		}
		s := &sgl[i]
		l := uint64(s.Length)
		if off >= l {
			off -= l
			continue
		}
		take := min(l-off, n)
		m := d.lkeys[s.LKey]
		if m == nil || m.pd != pd || !m.access.Has(need) {
			return false
		}
		mem, ok := m.span(s.Addr+off, take)
		if !ok {
			return false
		}
		fn(mem)
		n -= take
		off = 0
	}
	return n == 0
}

// sglLen is the total length of a scatter/gather list.
func sglLen(sgl []verbs.SGE) uint64 {
	var n uint64
	for i := range sgl {
		n += uint64(sgl[i].Length)
	}
	return n
}

// remoteCheck validates a remote access of n bytes at va with rkey for a
// QP of pd that allows qpAccess. n == 0 passes without a key (IBA C9-88).
func (d *Device) remoteCheckLocked(pd *PD, qpAccess verbs.Access, rkey uint32, va, n uint64, need verbs.Access) ([]byte, bool) {
	if n == 0 {
		return nil, true
	}
	if !qpAccess.Has(need) {
		return nil, false
	}
	m := d.rkeys[rkey]
	if m == nil || m.pd != pd || !m.access.Has(need) {
		return nil, false
	}
	return m.span(va, n)
}

// remoteCheck reports whether a remote access would be allowed.
func (d *Device) remoteCheck(pd *PD, qpAccess verbs.Access, rkey uint32, va, n uint64, need verbs.Access) bool {
	d.mrMu.RLock()
	_, ok := d.remoteCheckLocked(pd, qpAccess, rkey, va, n, need)
	d.mrMu.RUnlock()
	return ok
}

// remoteWrite places src at va for an incoming RDMA WRITE.
func (d *Device) remoteWrite(pd *PD, qpAccess verbs.Access, rkey uint32, va uint64, src []byte) bool {
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	mem, ok := d.remoteCheckLocked(pd, qpAccess, rkey, va, uint64(len(src)), verbs.AccessRemoteWrite)
	if ok {
		copy(mem, src)
	}
	return ok
}

// remoteRead copies the memory at va into dst for an incoming RDMA READ.
func (d *Device) remoteRead(pd *PD, qpAccess verbs.Access, rkey uint32, va uint64, dst []byte) bool {
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	mem, ok := d.remoteCheckLocked(pd, qpAccess, rkey, va, uint64(len(dst)), verbs.AccessRemoteRead)
	if ok {
		copy(dst, mem)
	}
	return ok
}

// remoteAtomic executes CMP_AND_SWP (cmpSwap) or FETCH_AND_ADD on the
// 8-byte aligned word at va, in host byte order, and returns its old value.
func (d *Device) remoteAtomic(pd *PD, qpAccess verbs.Access, rkey uint32, va uint64, cmpSwap bool, swapAdd, compare uint64) (uint64, bool) {
	if va%8 != 0 {
		return 0, false
	}
	d.mrMu.RLock()
	defer d.mrMu.RUnlock()
	mem, ok := d.remoteCheckLocked(pd, qpAccess, rkey, va, 8, verbs.AccessRemoteAtomic)
	if !ok {
		return 0, false
	}
	// The MR's memory is outside the Go heap and va is 8-byte aligned, so
	// the word can be updated atomically against local CPU accesses too.
	w := (*uint64)(unsafe.Pointer(&mem[0]))
	if !cmpSwap {
		return atomic.AddUint64(w, swapAdd) - swapAdd, true
	}
	for {
		old := atomic.LoadUint64(w)
		if old != compare {
			return old, true
		}
		if atomic.CompareAndSwapUint64(w, old, swapAdd) {
			return old, true
		}
	}
}
