package rsock

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/rsock-go/rsock/ring"
	"github.com/rsock-go/rsock/verbs"
)

// maxCtrlSends bounds the control messages in flight from one side.
const maxCtrlSends = 16

// Endpoint is one side of a stream before it is connected: a queue pair in
// INIT and registered rings. Its Params go to the peer; Connect takes the
// peer's.
type Endpoint struct {
	cfg    Config
	dev    verbs.Device
	pd     verbs.PD // the endpoint's own: its rkey works on its QP only
	cq     verbs.CQ
	qp     verbs.QP
	mem    []byte // one mapping: receive ring | send ring | control slots
	recv   *ring.Ring
	send   *ring.Ring
	ctrl   []byte // RecvDepth receive slots, then maxCtrlSends send slots
	recvMR verbs.MR
	sendMR verbs.MR
	ctrlMR verbs.MR
	params Params
	used   bool // connected or closed

	// recvSGEs[i] names receive slot i; fixed once created, so posts
	// outside the stream's mu may read it.
	recvSGEs []verbs.SGE
	// reposts are the receive slots freed while the stream handles a
	// batch of completions, given back with one PostRecv; spare is the
	// other buffer, the one a post in progress reads. Both, and
	// reposting (a post of them is in progress outside mu), are guarded
	// by the stream's mu.
	reposts, spare []verbs.RecvWR
	reposting      bool
}

// localPorter is implemented by devices whose peers address them by UDP
// port (soft-RoCE).
type localPorter interface{ LocalAddr() netip.AddrPort }

// NewEndpoint creates a queue pair on dev and registers the rings, in a
// protection domain of their own: the ring's rkey, which the peer learns,
// is valid on this endpoint's queue pair only, so that a peer of one
// connection cannot write into another's rings on the same device
// (guessing their rkeys), and a wrong rkey fails the queue pair that sent
// it.
func NewEndpoint(dev verbs.Device, cfg Config) (_ *Endpoint, err error) {
	if err := cfg.setDefaults(); err != nil {
		return nil, err
	}
	port := dev.Port()
	if port.State != verbs.PortActive || len(port.GIDs) == 0 {
		return nil, fmt.Errorf("rsock: device %s port is not active", dev.Name())
	}
	e := &Endpoint{cfg: cfg, dev: dev}
	defer func() {
		if err != nil {
			e.release()
		}
	}()
	if e.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	pd := e.pd
	ctrlBytes := (cfg.RecvDepth + maxCtrlSends) * controlLen
	if e.mem, err = verbs.AllocBuffer(2*cfg.RingSize + ctrlBytes); err != nil {
		return nil, err
	}
	rs := cfg.RingSize
	e.recv, _ = ring.New(e.mem[:rs:rs])
	e.send, _ = ring.New(e.mem[rs : 2*rs : 2*rs])
	e.ctrl = e.mem[2*rs:]
	if e.recvMR, err = pd.RegMR(e.mem[:rs], verbs.AccessLocalWrite|verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	if e.sendMR, err = pd.RegMR(e.mem[rs:2*rs], 0); err != nil {
		return nil, err
	}
	if e.ctrlMR, err = pd.RegMR(e.ctrl, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	sendWR := 2*cfg.RecvDepth + maxCtrlSends
	if e.cq, err = dev.CreateCQ(sendWR + cfg.RecvDepth + 16); err != nil {
		return nil, err
	}
	if e.qp, err = pd.CreateQP(&verbs.QPInitAttr{SendCQ: e.cq, RecvCQ: e.cq, Cap: verbs.QPCap{
		MaxSendWR: uint32(sendWR), MaxRecvWR: uint32(cfg.RecvDepth), MaxSendSGE: 2, MaxRecvSGE: 1,
	}}); err != nil {
		return nil, err
	}
	if err = verbs.InitRC(e.qp, verbs.AccessRemoteWrite); err != nil {
		return nil, err
	}
	// Receives may be posted from INIT on, so a fast peer never sees RNR.
	e.recvSGEs = make([]verbs.SGE, cfg.RecvDepth)
	wrs := make([]verbs.RecvWR, cfg.RecvDepth)
	for i := range wrs {
		e.recvSGEs[i] = e.ctrlSGE(i)
		wrs[i] = e.recvWR(i)
	}
	if _, err = e.qp.PostRecv(wrs); err != nil {
		return nil, err
	}
	e.reposts, e.spare = make([]verbs.RecvWR, 0, cfg.RecvDepth), wrs[:0]
	mtu := port.ActiveMTU
	if cfg.MaxMTU != 0 {
		mtu = min(mtu, verbs.MTUFromBytes(cfg.MaxMTU))
	}
	_, sr := e.qp.(verbs.SelectiveRepeater)
	_, cc := e.qp.(verbs.CongestionController)
	_, ws := e.qp.(verbs.WideSACKer)
	e.params = Params{
		GID:             port.GIDs[0],
		UDPPort:         verbs.RoCEv2Port,
		QPN:             e.qp.QPN(),
		PSN:             rand.Uint32() & 0xffffff,
		MTU:             mtu.Bytes(),
		SelectiveRepeat: sr && !cfg.GoBackN,
		RingAddr:        e.recvMR.Addr(),
		RingRKey:        e.recvMR.RKey(),
		RingSize:        rs,
		RecvDepth:       cfg.RecvDepth,
	}
	e.params.CongestionControl = cc && e.params.SelectiveRepeat && !cfg.NoCongestionControl
	_, ecn := e.qp.(verbs.ECNReactor)
	e.params.ECN = ecn && e.params.CongestionControl && cfg.ECN
	e.params.WideSACK = ws && e.params.SelectiveRepeat
	_, de := e.qp.(verbs.DuplicateEchoer)
	e.params.DuplicateEcho = de && e.params.CongestionControl
	_, he := e.qp.(verbs.HoldEchoer)
	e.params.HoldEcho = he && e.params.CongestionControl
	if _, pm := e.qp.(verbs.PacketMTUSetter); pm && cfg.MaxPacketMTU > mtu.Bytes() {
		e.params.PacketMTU = cfg.MaxPacketMTU
	}
	if lp, ok := dev.(localPorter); ok {
		e.params.UDPPort = lp.LocalAddr().Port()
	}
	return e, nil
}

// ctrlSGE names control slot i: receive slots first, then send slots.
func (e *Endpoint) ctrlSGE(i int) verbs.SGE {
	return verbs.SGE{Addr: e.ctrlMR.Addr() + uint64(i*controlLen), Length: controlLen, LKey: e.ctrlMR.LKey()}
}

// recvWR is the receive request for receive slot i.
func (e *Endpoint) recvWR(i int) verbs.RecvWR {
	return verbs.RecvWR{ID: uint64(i), SGL: e.recvSGEs[i : i+1 : i+1]}
}

func (e *Endpoint) ctrlSlot(i int) []byte { return e.ctrl[i*controlLen : (i+1)*controlLen] }

// Params returns what the peer needs to connect to this endpoint.
func (e *Endpoint) Params() Params { return e.params }

// Close releases an endpoint that was not connected. It is idempotent.
func (e *Endpoint) Close() error {
	if e.used {
		return nil
	}
	e.used = true
	return e.release()
}

// release destroys the QP, CQ and MRs and unmaps the rings, and reports
// what failed.
func (e *Endpoint) release() error {
	var errs []error
	if e.qp != nil {
		errs = append(errs, e.qp.Close())
	}
	if e.cq != nil {
		errs = append(errs, e.cq.Close())
	}
	for _, m := range []verbs.MR{e.recvMR, e.sendMR, e.ctrlMR} {
		if dc, ok := m.(verbs.DiscardCloser); ok && e.mem != nil {
			errs = append(errs, dc.CloseDiscard()) // the rings are freed next
		} else if m != nil {
			errs = append(errs, m.Close())
		}
	}
	if e.mem != nil {
		errs = append(errs, verbs.FreeBuffer(e.mem))
		e.mem = nil
	}
	if e.pd != nil {
		errs = append(errs, e.pd.Close())
		e.pd = nil
	}
	return errors.Join(errs...)
}
