//go:build rdmacore

package rdmacore

// #include "shim.h"
import "C"

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"unsafe"

	"github.com/rsock-go/rsock/verbs"
)

// PD is a protection domain (ibv_pd).
type PD struct {
	dev *Device
	pd  *C.struct_ibv_pd

	mu     sync.Mutex // guards the object sets and closed
	mrs    map[*MR]struct{}
	qps    map[*QP]struct{}
	closed bool
}

var _ verbs.PD = (*PD)(nil)

// RegMR registers buf, which must be memory from verbs.AllocBuffer (or
// other memory outside the Go heap) that stays mapped until the MR is
// closed.
func (p *PD) RegMR(buf []byte, access verbs.Access) (verbs.MR, error) {
	if len(buf) == 0 {
		return nil, fmt.Errorf("rdmacore: register an empty buffer: %w", verbs.ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, verbs.ErrClosed
	}
	addr := uintptr(unsafe.Pointer(unsafe.SliceData(buf)))
	mr, err := C.rs_reg_mr(p.pd, C.uintptr_t(addr), C.size_t(len(buf)), C.int(access))
	if mr == nil {
		return nil, callErr(fmt.Sprintf("ibv_reg_mr of %d bytes, access %#x", len(buf), uint32(access)), errnoOf(err))
	}
	m := &MR{pd: p, mr: mr, buf: buf, access: access, lkey: uint32(mr.lkey), rkey: uint32(mr.rkey)}
	p.mrs[m] = struct{}{}
	return m, nil
}

// CreateQP creates an RC queue pair in the RESET state. Its CQs must be
// of the same device.
func (p *PD) CreateQP(attr *verbs.QPInitAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*CQ)
	rcq, ok2 := attr.RecvCQ.(*CQ)
	if !ok1 || !ok2 || scq.dev != p.dev || rcq.dev != p.dev {
		return nil, fmt.Errorf("rdmacore: a QP's CQs must be rdmacore CQs of its device: %w", verbs.ErrInvalidArgument)
	}
	c := attr.Cap
	if c.MaxSendWR == 0 && c.MaxRecvWR == 0 {
		return nil, fmt.Errorf("rdmacore: a QP with no work queue: %w", verbs.ErrInvalidArgument)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, verbs.ErrClosed
	}
	sigAll := C.int(0)
	if attr.SigAll {
		sigAll = 1
	}
	qp, err := C.rs_create_qp(p.pd, scq.cq, rcq.cq, C.uint32_t(c.MaxSendWR), C.uint32_t(c.MaxRecvWR),
		C.uint32_t(max(c.MaxSendSGE, 1)), C.uint32_t(max(c.MaxRecvSGE, 1)), C.uint32_t(c.MaxInlineData), sigAll)
	if qp == nil {
		return nil, callErr("ibv_create_qp", errnoOf(err))
	}
	q := newQP(p, qp, scq, rcq)
	p.qps[q] = struct{}{}
	return q, nil
}

// Close deallocates the PD. It fails with verbs.ErrBusy while MRs or QPs
// use it, and is idempotent.
func (p *PD) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if len(p.mrs)+len(p.qps) > 0 {
		return fmt.Errorf("rdmacore: PD holds %d MRs and %d QPs: %w", len(p.mrs), len(p.qps), verbs.ErrBusy)
	}
	if rc, err := C.ibv_dealloc_pd(p.pd); rc != 0 {
		return callErr("ibv_dealloc_pd", errnoOf(err))
	}
	p.closed = true
	p.dev.objMu.Lock()
	delete(p.dev.pds, p)
	p.dev.objMu.Unlock()
	return nil
}

// closeChildren destroys the PD's QPs, then its MRs (device Close).
func (p *PD) closeChildren() error {
	p.mu.Lock()
	qps, mrs := slices.Collect(maps.Keys(p.qps)), slices.Collect(maps.Keys(p.mrs))
	p.mu.Unlock()
	var errs []error
	for _, q := range qps {
		errs = append(errs, q.Close())
	}
	for _, m := range mrs {
		errs = append(errs, m.Close())
	}
	return errors.Join(errs...)
}

// MR is a registered memory region (ibv_mr).
type MR struct {
	pd         *PD
	mr         *C.struct_ibv_mr
	buf        []byte
	access     verbs.Access
	lkey, rkey uint32
	once       sync.Once
	err        error
}

var _ verbs.MR = (*MR)(nil)

// Buf is the registered memory.
func (m *MR) Buf() []byte { return m.buf }

// Addr is the virtual address of Buf[0].
func (m *MR) Addr() uint64 { return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(m.buf)))) }

// LKey is the local key.
func (m *MR) LKey() uint32 { return m.lkey }

// RKey is the remote key.
func (m *MR) RKey() uint32 { return m.rkey }

// Access returns the access flags it was registered with.
func (m *MR) Access() verbs.Access { return m.access }

// Close deregisters the region. It is idempotent.
func (m *MR) Close() error {
	m.once.Do(func() {
		if rc, err := C.ibv_dereg_mr(m.mr); rc != 0 {
			m.err = callErr("ibv_dereg_mr", errnoOf(err))
			return
		}
		m.pd.mu.Lock()
		delete(m.pd.mrs, m)
		m.pd.mu.Unlock()
	})
	return m.err
}
