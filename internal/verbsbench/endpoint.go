package verbsbench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strings"

	"github.com/rsock-go/rsock/internal/rocepeer"
	"github.com/rsock-go/rsock/verbs"
)

// Pattern seeds: each side fills its buffer with its own pattern, so the
// receiver of data can check where its bytes came from.
const (
	clientSeed byte = 0x3c
	serverSeed byte = 0xa5
)

// ProviderSoftRoCE names the soft-RoCE provider in Config.Provider: a
// device of its own on a UDP socket at Config.RoCE. Any other name is
// looked up in the verbs provider registry (rdmacore when the binary is
// built with -tags rdmacore) and opened for Config.RoCE's IP address.
const ProviderSoftRoCE = "softroce"

// endpoint is one side of a test: a device (soft-RoCE on its own UDP
// socket, or a registered provider's device), one RC QP and one
// registered buffer of slots message-sized slots.
type endpoint struct {
	dev    verbs.Device
	inline int            // the QP's inline capacity: smaller messages go inline
	base   verbs.Counters // the device's counters at open: an RDMA device's count from boot
	pd     verbs.PD
	scq    verbs.CQ
	rcq    verbs.CQ
	qp     verbs.QP
	buf    []byte
	mr     verbs.MR
	size   int
	slots  int
	psn    uint32
}

// openDevice opens provider's device for addr: soft-RoCE on a UDP socket
// at addr, or a registered provider's device with a RoCEv2 GID for
// addr's IP (its port is then 4791, the device's own).
func openDevice(provider string, addr netip.AddrPort) (verbs.Device, error) {
	if provider == "" || provider == ProviderSoftRoCE {
		dev, err := rocepeer.OpenDevice(addr)
		if err != nil {
			return nil, err
		}
		return dev, nil
	}
	open, ok := verbs.LookupProvider(provider)
	if !ok {
		have := append([]string{ProviderSoftRoCE}, verbs.Providers()...)
		return nil, fmt.Errorf("provider %q is not built into this binary (it has %s)", provider, strings.Join(have, ", "))
	}
	dev, err := open(addr.Addr())
	if err != nil {
		return nil, fmt.Errorf("%s device for %v: %w", provider, addr.Addr(), err)
	}
	return dev, nil
}

// openEndpoint opens provider's device for addr and creates the QP
// (moved to INIT) and buffer for the test p.
func openEndpoint(provider string, addr netip.AddrPort, p *Params, seed byte) (_ *endpoint, err error) {
	dev, err := openDevice(provider, addr)
	if err != nil {
		return nil, err
	}
	e := &endpoint{dev: dev, base: dev.Counters(), size: p.Size, slots: slotsFor(p.Size), psn: rand.Uint32() & psnMask}
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
	init := verbs.QPInitAttr{SendCQ: e.scq, RecvCQ: e.rcq, Cap: verbs.QPCap{
		MaxSendWR: uint32(max(p.TxDepth, 2*p.CQMod)), MaxRecvWR: uint32(p.RxDepth),
		MaxSendSGE: 1, MaxRecvSGE: 1, MaxInlineData: maxInline}}
	qp, err := e.pd.CreateQP(&init)
	if err != nil {
		// A device with less inline room than maxInline: go without.
		init.Cap.MaxInlineData = 0
		if qp, err = e.pd.CreateQP(&init); err != nil {
			return nil, fmt.Errorf("create QP: %w", err)
		}
	}
	e.qp, e.inline = qp, int(init.Cap.MaxInlineData)
	if e.buf, err = verbs.AllocBuffer(e.slots * e.size); err != nil {
		return nil, err
	}
	fillPattern(e.buf, e.size, seed)
	access := verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if e.mr, err = e.pd.RegMR(e.buf, access); err != nil {
		return nil, fmt.Errorf("register %d bytes: %w", len(e.buf), err)
	}
	if err = verbs.InitRC(e.qp, access); err != nil {
		return nil, err
	}
	return e, nil
}

// localPorter is implemented by devices whose peers address them by UDP
// port (soft-RoCE's udp link).
type localPorter interface{ LocalAddr() netip.AddrPort }

// roceAddr is this side's RoCEv2 address: its GID's IP and UDP port.
func (e *endpoint) roceAddr() netip.AddrPort {
	if lp, ok := e.dev.(localPorter); ok {
		return lp.LocalAddr()
	}
	var gid verbs.GID
	if gids := e.dev.Port().GIDs; len(gids) > 0 {
		gid = gids[0]
	}
	return netip.AddrPortFrom(gid.Addr(), roceUDPPort)
}

// roceUDPPort is RoCEv2's UDP port, where a device listens.
const roceUDPPort = verbs.RoCEv2Port

// counters returns the device's retransmit, timeout and RNR NAK counts
// since the endpoint opened it (an RDMA device's include other users').
func (e *endpoint) counters() (retransmits, timeouts, rnrNAKs uint64) {
	c := e.dev.Counters()
	return c.Retransmits - e.base.Retransmits, c.Timeouts - e.base.Timeouts, c.RNRNAKsSent - e.base.RNRNAKsSent
}

// transport names the device, e.g. "softroce/udp" or "rdmacore/rxe0".
func (e *endpoint) transport() string {
	if e.dev.Provider() == ProviderSoftRoCE {
		return ProviderSoftRoCE + "/" + e.dev.Link()
	}
	return e.dev.Provider() + "/" + e.dev.Name()
}

// describe fills the connection fields of p with this side's QP, RoCEv2
// address and memory region.
func (e *endpoint) describe(p *Params) {
	a := e.roceAddr()
	p.QPN = e.qp.QPN()
	p.PSN = e.psn
	p.GID = verbs.GIDFromAddr(a.Addr())
	p.Port = a.Port()
	p.Addr = e.mr.Addr()
	p.RKey = e.mr.RKey()
	p.Len = uint64(len(e.buf))
}

// connect moves the QP through RTR to RTS, aimed at peer. The path MTU
// is the test's, capped at the port's active MTU (a device's follows its
// Ethernet MTU).
func (e *endpoint) connect(peer *Params) error {
	mtu := verbs.MTUFromBytes(peer.MTU)
	if active := e.dev.Port().ActiveMTU; active != 0 {
		mtu = min(mtu, active)
	}
	// Timeout 14 is about 67 ms, as perftest; seven retries then fail the
	// QP when the peer is gone. RNR retry 7 waits for receives forever.
	return verbs.ConnectRC(e.qp, verbs.RCPeer{
		AH:      verbs.AH{DGID: peer.GID, DPort: peer.Port},
		PathMTU: mtu, DestQPN: peer.QPN, RQPSN: peer.PSN, SQPSN: e.psn,
		MaxDestRdAtomic: uint8(peer.Outs), MaxRdAtomic: uint8(peer.Outs), MinRNRTimer: 1,
		Timeout: 14, RetryCnt: 7, RNRRetry: 7,
	})
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
