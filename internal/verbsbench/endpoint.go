package verbsbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/rsock-go/rsock/internal/rocepeer"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
)

// Pattern seeds: each side fills its buffer with its own pattern, so the
// receiver of data can check where its bytes came from.
const (
	clientSeed byte = 0x3c
	serverSeed byte = 0xa5
)

// endpoint is one side of a test: a soft-RoCE device on its own UDP
// socket, one RC QP and one registered buffer of slots message-sized
// slots.
type endpoint struct {
	dev   *softroce.Device
	pd    verbs.PD
	scq   verbs.CQ
	rcq   verbs.CQ
	qp    verbs.QP
	buf   []byte
	mr    verbs.MR
	size  int
	slots int
	psn   uint32
}

// openEndpoint opens a device on addr and creates the QP (moved to INIT)
// and buffer for the test p.
func openEndpoint(addr netip.AddrPort, p *Params, seed byte) (_ *endpoint, err error) {
	dev, err := rocepeer.OpenDevice(addr)
	if err != nil {
		return nil, err
	}
	e := &endpoint{dev: dev, size: p.Size, slots: slotsFor(p.Size), psn: rand.Uint32() & psnMask}
	defer func() {
		if err != nil {
			e.close()
		}
	}()
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	depth := p.TxDepth + p.RxDepth + 64
	if e.scq, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	if e.rcq, err = dev.CreateCQ(depth); err != nil {
		return nil, err
	}
	qp, err := e.pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: verbs.QPCap{
		MaxSendWR: uint32(max(p.TxDepth, 2*p.CQMod)), MaxRecvWR: uint32(p.RxDepth),
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: maxInline}})
	if err != nil {
		return nil, fmt.Errorf("create QP: %w", err)
	}
	e.qp = qp
	if e.buf, err = verbs.AllocBuffer(e.slots * e.size); err != nil {
		return nil, err
	}
	fillPattern(e.buf, e.size, seed)
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if e.mr, err = e.pd.RegMR(e.buf, access); err != nil {
		return nil, fmt.Errorf("register %d bytes: %w", len(e.buf), err)
	}
	err = e.qp.Modify(&verbs.QPAttr{State: verbs.QPSInit, Port: 1, AccessFlags: access},
		verbs.AttrState|verbs.AttrPKeyIndex|verbs.AttrPort|verbs.AttrAccessFlags)
	if err != nil {
		return nil, fmt.Errorf("QP to INIT: %w", err)
	}
	return e, nil
}

// describe fills the connection fields of p with this side's QP, link
// address and memory region.
func (e *endpoint) describe(p *Params) {
	a := e.dev.LocalAddr()
	p.QPN = e.qp.QPN()
	p.PSN = e.psn
	p.GID = verbs.GIDFromAddr(a.Addr())
	p.Port = a.Port()
	p.Addr = e.mr.Addr()
	p.RKey = e.mr.RKey()
	p.Len = uint64(len(e.buf))
}

// connect moves the QP through RTR to RTS, aimed at peer.
func (e *endpoint) connect(peer *Params) error {
	err := e.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTR,
		AH:      verbs.AH{DGID: peer.GID, DPort: peer.Port},
		PathMTU: verbs.MTUFromBytes(peer.MTU), DestQPN: peer.QPN, RQPSN: peer.PSN,
		MaxDestRdAtomic: uint8(peer.Outs), MinRNRTimer: 1},
		verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|
			verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	if err != nil {
		return fmt.Errorf("QP to RTR: %w", err)
	}
	// Timeout 14 is about 67 ms, as perftest; seven retries then fail the
	// QP when the peer is gone. RNR retry 7 waits for receives forever.
	err = e.qp.Modify(&verbs.QPAttr{State: verbs.QPSRTS, SQPSN: e.psn, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
		MaxRdAtomic: uint8(peer.Outs)},
		verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	if err != nil {
		return fmt.Errorf("QP to RTS: %w", err)
	}
	return nil
}

// close releases the device and the buffer.
func (e *endpoint) close() {
	e.dev.Close()
	if e.buf != nil {
		verbs.FreeBuffer(e.buf)
		e.buf = nil
	}
}

// sge names slot i (modulo the slot count) of the buffer.
func (e *endpoint) sge(i uint64) verbs.SGE {
	off := int(i%uint64(e.slots)) * e.size
	return verbs.SGE{Addr: e.mr.Addr() + uint64(off), Length: uint32(e.size), LKey: e.mr.LKey()}
}

// postRecvs posts n receives numbered from id; with data they point at
// the buffer's slots, else they have no scatter list (enough for
// WRITE_WITH_IMM).
func (e *endpoint) postRecvs(id uint64, n int, data bool) error {
	var sge [1]verbs.SGE
	wr := make([]verbs.RecvWR, 1)
	for i := range n {
		wr[0] = verbs.RecvWR{ID: id + uint64(i)}
		if data {
			sge[0] = e.sge(id + uint64(i))
			wr[0].SGL = sge[:]
		}
		if _, err := e.qp.PostRecv(wr); err != nil {
			return fmt.Errorf("post receive: %w", err)
		}
	}
	return nil
}

// WCError is a failed work completion.
type WCError struct {
	WC verbs.WC
}

func (e *WCError) Error() string {
	return fmt.Sprintf("completion error: %v (%v, wr %d)", e.WC.Status, e.WC.Opcode, e.WC.WRID)
}

// wcError explains a failed completion. A flushed one only says the QP is
// in error; the send queue's first failure says why, so look for it.
func (e *endpoint) wcError(wc verbs.WC) error {
	if wc.Status == verbs.WCWRFlushErr {
		var wcs [16]verbs.WC
		for {
			n, _ := e.scq.Poll(wcs[:])
			if n == 0 {
				break
			}
			for _, w := range wcs[:n] {
				if w.Status != verbs.WCSuccess && w.Status != verbs.WCWRFlushErr {
					return &WCError{w}
				}
			}
		}
	}
	return &WCError{wc}
}

// waitCQ waits for cq to hold a completion, turning a cancelled context
// into its cause.
func waitCQ(ctx context.Context, cq verbs.CQ) error {
	if err := cq.Wait(ctx); err != nil {
		if c := context.Cause(ctx); c != nil {
			return c
		}
		return err
	}
	return nil
}

// pollErr turns a Poll error into a test failure.
func pollErr(err error) error {
	if errors.Is(err, verbs.ErrCQOverrun) {
		return fmt.Errorf("completion queue overrun: %w", err)
	}
	return fmt.Errorf("poll CQ: %w", err)
}

// fillPattern fills every size-byte slot of b with the pattern of seed.
func fillPattern(b []byte, size int, seed byte) {
	for off := 0; off < len(b); off += size {
		s := b[off:min(off+size, len(b))]
		for i := range s {
			s[i] = patternByte(i, seed)
		}
	}
}

func patternByte(i int, seed byte) byte { return byte(i%251) ^ byte(i>>8) ^ seed }

// checkSlots checks that the first n slots of the buffer hold seed's
// pattern and returns the number of bytes checked.
func (e *endpoint) checkSlots(n uint64, seed byte) (uint64, error) {
	n = min(n, uint64(e.slots))
	for k := range n {
		s := e.buf[int(k)*e.size : int(k+1)*e.size]
		for i, v := range s {
			if v != patternByte(i, seed) {
				return 0, fmt.Errorf("data check: slot %d byte %d is %#02x, want %#02x", k, i, v, patternByte(i, seed))
			}
		}
	}
	return n * uint64(e.size), nil
}
