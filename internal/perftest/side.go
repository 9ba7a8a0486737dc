package perftest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"

	"github.com/rsock-go/rsock/internal/rocepeer"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
)

// side holds one side's device, queue pair and buffer. The buffer is laid
// out as perftest's: a send half and a receive half of buffSize bytes
// each; the peer is given the receive half.
type side struct {
	cfg      Config
	dev      *softroce.Device
	pd       verbs.PD
	cq       verbs.CQ
	qp       verbs.QP
	buf      []byte
	mr       verbs.MR
	buffSize int
	self     Dest

	rwrs  []verbs.RecvWR // postRecvs' work requests, reused
	rsges []verbs.SGE
}

// open creates the device on addr and the queue pair in INIT, with a
// buffer of two halves of buffSize bytes that the peer may WRITE and READ.
func open(cfg Config, addr netip.AddrPort, buffSize int) (_ *side, err error) {
	dev, err := rocepeer.OpenDevice(addr)
	if err != nil {
		return nil, err
	}
	s := &side{cfg: cfg, dev: dev, buffSize: buffSize}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = dev.CreateCQ(cfg.TxDepth + cfg.RxDepth + 1); err != nil {
		return nil, err
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{
		MaxSendWR: uint32(cfg.TxDepth), MaxRecvWR: uint32(cfg.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("create QP: %w", err)
	}
	if s.buf, err = verbs.AllocBuffer(2 * buffSize); err != nil {
		return nil, err
	}
	for i := range buffSize {
		s.buf[i] = byte(i)
	}
	remote := verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite|remote); err != nil {
		return nil, fmt.Errorf("register %d bytes: %w", len(s.buf), err)
	}
	if err = verbs.InitRC(s.qp, remote); err != nil {
		return nil, err
	}
	s.self = Dest{
		OutReads: uint16(cfg.OutReads),
		QPN:      s.qp.QPN(),
		PSN:      rand.Uint32() & 0xffffff,
		RKey:     s.mr.RKey(),
		VAddr:    s.mr.Addr() + uint64(buffSize),
		GID:      verbs.GIDFromAddr(dev.LocalAddr().Addr()),
	}
	return s, nil
}

// close releases everything.
func (s *side) close() {
	// Device.Close closes the QP (which sends an ACK still owed for the
	// peer's last message) before the link, then the buffer can go.
	s.dev.Close()
	if s.buf != nil {
		verbs.FreeBuffer(s.buf)
		s.buf = nil
	}
}

// connect moves the QP to RTR and RTS with perftest's attributes.
func (s *side) connect(rem Dest, mtu verbs.MTU) error {
	if rem.GID == (verbs.GID{}) {
		return errors.New("perftest: peer sent an all-zero GID: RoCE needs one")
	}
	return verbs.ConnectRC(s.qp, verbs.RCPeer{
		AH:      verbs.AH{DGID: rem.GID, HopLimit: 0xff, DPort: s.cfg.PeerRoCEPort},
		PathMTU: mtu, DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: s.self.PSN,
		MaxDestRdAtomic: uint8(s.self.OutReads), MaxRdAtomic: uint8(min(max(int(rem.OutReads), 1), 128)),
		MinRNRTimer: minRNRTimer, Timeout: s.cfg.QPTimeout, RetryCnt: 7, RNRRetry: 7,
	})
}

// sendHalf and recvHalf return the SGE of a message of size bytes at the
// start of each half.
func (s *side) sendHalf(size int) verbs.SGE {
	return verbs.SGE{Addr: s.mr.Addr(), Length: uint32(size), LKey: s.mr.LKey()}
}

func (s *side) recvHalf(size int) verbs.SGE {
	return verbs.SGE{Addr: s.mr.Addr() + uint64(s.buffSize), Length: uint32(size), LKey: s.mr.LKey()}
}
