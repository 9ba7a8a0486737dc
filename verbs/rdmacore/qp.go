//go:build rdmacore

package rdmacore

// #include "shim.h"
import "C"

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/rsock-go/rsock/verbs"
)

// roceUDPPort is the RoCEv2 UDP port, the only one an RNIC sends to.
const roceUDPPort = verbs.RoCEv2Port

// QP is an RC queue pair (ibv_qp).
type QP struct {
	pd       *PD
	qp       *C.struct_ibv_qp
	scq, rcq *CQ
	qpn      uint32

	// life is held shared by posts and modifies, exclusively by Close,
	// so that the ibv_qp is not destroyed under a call.
	life   sync.RWMutex
	closed bool

	cause atomic.Pointer[error] // the async event that failed the QP

	scratch sync.Pool // *postScratch
}

var (
	_ verbs.QP     = (*QP)(nil)
	_ verbs.Causer = (*QP)(nil)
)

// postScratch holds the flat work requests and scatter lists of one post.
type postScratch struct {
	swr []C.struct_rs_swr
	rwr []C.struct_rs_rwr
	sge []C.struct_ibv_sge
}

func newQP(p *PD, qp *C.struct_ibv_qp, scq, rcq *CQ) *QP {
	q := &QP{pd: p, qp: qp, scq: scq, rcq: rcq, qpn: uint32(qp.qp_num)}
	q.scratch.New = func() any { return new(postScratch) }
	return q
}

// QPN is the queue pair number.
func (q *QP) QPN() uint32 { return q.qpn }

// State queries the current state.
func (q *QP) State() verbs.QPState { return q.Query().State }

// Query returns the current attributes (ibv_query_qp); AH.SGIDIndex
// counts in the device's GID view (Port().GIDs).
func (q *QP) Query() verbs.QPAttr {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.closed {
		return verbs.QPAttr{State: verbs.QPSErr}
	}
	var a C.struct_rs_qpattr
	if C.rs_query_qp(q.qp, &a) != 0 {
		return verbs.QPAttr{State: verbs.QPSErr}
	}
	var dgid verbs.GID
	for i := range dgid {
		dgid[i] = byte(a.dgid[i])
	}
	return verbs.QPAttr{
		State:       verbs.QPState(a.state),
		AccessFlags: verbs.Access(a.access),
		PKeyIndex:   uint16(a.pkey_index),
		Port:        uint8(a.port),
		AH: verbs.AH{DGID: dgid, SGIDIndex: q.pd.dev.view.viewIndex(uint8(a.sgid_index)),
			HopLimit: uint8(a.hop_limit), TrafficClass: uint8(a.tclass), FlowLabel: uint32(a.flow_label)},
		PathMTU:         verbs.MTU(a.path_mtu),
		Timeout:         uint8(a.timeout),
		RetryCnt:        uint8(a.retry_cnt),
		RNRRetry:        uint8(a.rnr_retry),
		RQPSN:           uint32(a.rq_psn),
		MaxRdAtomic:     uint8(a.max_rd_atomic),
		MinRNRTimer:     uint8(a.min_rnr_timer),
		SQPSN:           uint32(a.sq_psn),
		MaxDestRdAtomic: uint8(a.max_dest_rd_atomic),
		DestQPN:         uint32(a.dest_qpn),
		Cap: verbs.QPCap{MaxSendWR: uint32(a.cap_send_wr), MaxRecvWR: uint32(a.cap_recv_wr),
			MaxSendSGE: uint32(a.cap_send_sge), MaxRecvSGE: uint32(a.cap_recv_sge), MaxInlineData: uint32(a.cap_inline)},
	}
}

// Modify applies the attributes selected by mask, after checking the
// state change against verbs.CheckTransition as every provider does.
// AH.DPort must be 0 or 4791: a device sends RoCEv2 only to 4791.
func (q *QP) Modify(attr *verbs.QPAttr, mask verbs.QPAttrMask) error {
	q.life.RLock()
	defer q.life.RUnlock()
	if q.closed {
		return verbs.ErrClosed
	}
	var a C.struct_rs_qpattr
	if mask&verbs.AttrState != 0 {
		var cur C.struct_rs_qpattr
		if rc := C.rs_query_qp(q.qp, &cur); rc != 0 {
			return callErr("ibv_query_qp", syscall.Errno(rc))
		}
		if err := verbs.CheckTransition(verbs.QPState(cur.state), attr.State, mask); err != nil {
			return err
		}
		a.cur_state = cur.state
	}
	if mask&verbs.AttrAV != 0 {
		if attr.AH.DPort != 0 && attr.AH.DPort != roceUDPPort {
			return fmt.Errorf("rdmacore: the peer's RoCEv2 UDP port is %d; an RDMA device sends only to %d: %w",
				attr.AH.DPort, roceUDPPort, verbs.ErrInvalidArgument)
		}
		sgid, err := q.pd.dev.view.deviceIndex(attr.AH.SGIDIndex)
		if err != nil {
			return err
		}
		for i, b := range attr.AH.DGID {
			a.dgid[i] = C.uint8_t(b)
		}
		a.sgid_index = C.uint8_t(sgid)
		a.hop_limit = C.uint8_t(attr.AH.HopLimit)
		if a.hop_limit == 0 {
			a.hop_limit = 64
		}
		a.tclass = C.uint8_t(attr.AH.TrafficClass)
		a.flow_label = C.uint32_t(attr.AH.FlowLabel)
	}
	a.state = C.uint8_t(attr.State)
	a.path_mtu = C.uint8_t(attr.PathMTU)
	a.access = C.uint32_t(attr.AccessFlags)
	a.pkey_index = C.uint16_t(attr.PKeyIndex)
	a.port = C.uint8_t(attr.Port)
	if a.port == 0 {
		a.port = 1
	}
	a.timeout = C.uint8_t(attr.Timeout)
	a.retry_cnt = C.uint8_t(attr.RetryCnt)
	a.rnr_retry = C.uint8_t(attr.RNRRetry)
	a.rq_psn = C.uint32_t(attr.RQPSN)
	a.sq_psn = C.uint32_t(attr.SQPSN)
	a.max_rd_atomic = C.uint8_t(attr.MaxRdAtomic)
	a.min_rnr_timer = C.uint8_t(attr.MinRNRTimer)
	a.max_dest_rd_atomic = C.uint8_t(attr.MaxDestRdAtomic)
	a.dest_qpn = C.uint32_t(attr.DestQPN)
	a.cap_send_wr = C.uint32_t(attr.Cap.MaxSendWR)
	a.cap_recv_wr = C.uint32_t(attr.Cap.MaxRecvWR)
	a.cap_send_sge = C.uint32_t(attr.Cap.MaxSendSGE)
	a.cap_recv_sge = C.uint32_t(attr.Cap.MaxRecvSGE)
	a.cap_inline = C.uint32_t(attr.Cap.MaxInlineData)
	if rc := C.rs_modify_qp(q.qp, &a, C.int(mask)); rc != 0 {
		return callErr(fmt.Sprintf("ibv_modify_qp to %v (mask %#x)", attr.State, uint32(mask)), syscall.Errno(rc))
	}
	return nil
}

// PostSend queues send work requests with one cgo call. It returns
// verbs.ErrQueueFull when the send queue is full, and
// verbs.ErrInvalidState before RTS, each with the count posted before.
func (q *QP) PostSend(wrs []verbs.SendWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	s := q.scratch.Get().(*postScratch)
	defer q.scratch.Put(s)
	s.swr = s.swr[:0]
	s.sge = s.sge[:0]
	for i := range wrs {
		w := &wrs[i]
		s.swr = append(s.swr, C.struct_rs_swr{
			id: C.uint64_t(w.ID), remote_addr: C.uint64_t(w.RemoteAddr), compare_add: C.uint64_t(w.CompareAdd),
			swap: C.uint64_t(w.Swap), opcode: C.uint32_t(w.Opcode), flags: C.uint32_t(w.Flags), imm: C.uint32_t(w.Imm),
			rkey: C.uint32_t(w.RKey), nsge: C.uint32_t(len(w.SGL)), sge_off: C.uint32_t(len(s.sge)),
		})
		s.appendSGL(w.SGL)
	}
	q.life.RLock()
	defer q.life.RUnlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	var posted C.int
	cgoCalls.Add(1)
	rc := C.rs_post_send(q.qp, &s.swr[0], C.int(len(s.swr)), sgePtr(s.sge), &posted)
	return int(posted), q.postErr("ibv_post_send", rc)
}

// PostRecv queues receive work requests with one cgo call, as PostSend.
func (q *QP) PostRecv(wrs []verbs.RecvWR) (int, error) {
	if len(wrs) == 0 {
		return 0, nil
	}
	s := q.scratch.Get().(*postScratch)
	defer q.scratch.Put(s)
	s.rwr = s.rwr[:0]
	s.sge = s.sge[:0]
	for i := range wrs {
		w := &wrs[i]
		s.rwr = append(s.rwr, C.struct_rs_rwr{id: C.uint64_t(w.ID), nsge: C.uint32_t(len(w.SGL)), sge_off: C.uint32_t(len(s.sge))})
		s.appendSGL(w.SGL)
	}
	q.life.RLock()
	defer q.life.RUnlock()
	if q.closed {
		return 0, verbs.ErrClosed
	}
	var posted C.int
	cgoCalls.Add(1)
	rc := C.rs_post_recv(q.qp, &s.rwr[0], C.int(len(s.rwr)), sgePtr(s.sge), &posted)
	return int(posted), q.postErr("ibv_post_recv", rc)
}

// appendSGL adds a work request's scatter/gather list to the batch's SGEs.
func (s *postScratch) appendSGL(sgl []verbs.SGE) {
	for _, g := range sgl {
		s.sge = append(s.sge, C.struct_ibv_sge{addr: C.uint64_t(g.Addr), length: C.uint32_t(g.Length), lkey: C.uint32_t(g.LKey)})
	}
}

// sgePtr returns the first SGE, or nil for none.
func sgePtr(s []C.struct_ibv_sge) *C.struct_ibv_sge {
	if len(s) == 0 {
		return nil
	}
	return &s[0]
}

// postErr turns a post's error number into the verbs errors: ENOMEM is a
// full queue; EINVAL in a state that cannot post is a state error.
func (q *QP) postErr(call string, rc C.int) error {
	if rc == 0 {
		return nil
	}
	errno := syscall.Errno(rc)
	switch errno {
	case syscall.ENOMEM:
		return fmt.Errorf("rdmacore: %s: %w (%w)", call, verbs.ErrQueueFull, errno)
	case syscall.EINVAL:
		var a C.struct_rs_qpattr
		if C.rs_query_qp(q.qp, &a) == 0 && verbs.QPState(a.state) < verbs.QPSRTS && call == "ibv_post_send" {
			return fmt.Errorf("rdmacore: %s in %v: %w (%w)", call, verbs.QPState(a.state), verbs.ErrInvalidState, errno)
		}
	}
	return callErr(call, errno)
}

// Close destroys the QP. It is idempotent.
func (q *QP) Close() error {
	q.life.Lock()
	defer q.life.Unlock()
	if q.closed {
		return nil
	}
	if rc, err := C.ibv_destroy_qp(q.qp); rc != 0 {
		return callErr("ibv_destroy_qp", errnoOf(err))
	}
	q.closed = true
	q.pd.mu.Lock()
	delete(q.pd.qps, q)
	q.pd.mu.Unlock()
	return nil
}
