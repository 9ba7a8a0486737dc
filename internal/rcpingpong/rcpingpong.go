package rcpingpong

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"time"

	"github.com/rsock-go/rsock/internal/rocepeer"
	"github.com/rsock-go/rsock/verbs"
	"github.com/rsock-go/rsock/verbs/softroce"
)

// Defaults, as ibv_rc_pingpong's.
const (
	DefaultTCPPort = 18515
	DefaultSize    = 4096
	DefaultIters   = 1000
	DefaultMTU     = 1024
	DefaultRxDepth = 500
	// DefaultTimeout bounds the exchange and any stretch without a
	// completion. Generous: the rxe peer may run under emulation.
	DefaultTimeout = 60 * time.Second
	// DefaultLinger keeps the QP after the last completion: should the
	// ACK of the peer's last SEND be lost, its retry is still answered.
	DefaultLinger = 250 * time.Millisecond
)

// Work request IDs, as ibv_rc_pingpong's.
const (
	recvWRID = 1
	sendWRID = 2
)

// Config is one side's settings. Zero fields take the defaults.
type Config struct {
	Size    int // bytes per message
	Iters   int // round trips
	MTU     int // path MTU in bytes: 256, 512, 1024, 2048 or 4096
	RxDepth int // receives kept posted

	// RoCE is the local address of the soft-RoCE UDP link. If invalid,
	// the IP that routes to the peer (the server's host for a client, the
	// client's GID for a server) and port 4791.
	RoCE netip.AddrPort
	// PeerRoCEPort is the UDP port the peer's RoCE link listens on;
	// zero means 4791. Only in-process tests need another.
	PeerRoCEPort uint16

	// Timeout bounds the exchange and any stretch without a completion.
	Timeout time.Duration
	// Linger keeps the queue pair open after the last completion so the
	// ACK of the peer's last message goes out (and is sent again should
	// the peer retry it). Default DefaultLinger; negative means none.
	Linger time.Duration
	// Log receives ibv_rc_pingpong's address lines; nil discards them.
	Log io.Writer
}

func (c Config) withDefaults() Config {
	if c.Size == 0 {
		c.Size = DefaultSize
	}
	if c.Iters == 0 {
		c.Iters = DefaultIters
	}
	if c.MTU == 0 {
		c.MTU = DefaultMTU
	}
	if c.RxDepth == 0 {
		c.RxDepth = DefaultRxDepth
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.Linger == 0 {
		c.Linger = DefaultLinger
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	return c
}

// Check reports the first setting of c (after defaults) that is not valid.
func (c Config) Check() error {
	c = c.withDefaults()
	switch {
	case c.Size < 1 || c.Size > 1<<30:
		return fmt.Errorf("size %d out of range 1..1 GiB", c.Size)
	case c.Iters < 1:
		return fmt.Errorf("iterations %d must be positive", c.Iters)
	case c.RxDepth < 2 || c.RxDepth > 1<<16:
		return fmt.Errorf("rx depth %d out of range 2..65536", c.RxDepth)
	}
	switch c.MTU {
	case 256, 512, 1024, 2048, 4096:
	default:
		return fmt.Errorf("MTU %d: want 256, 512, 1024, 2048 or 4096", c.MTU)
	}
	return nil
}

// Result is what one side did.
type Result struct {
	Local, Remote Dest
	Bytes         int64 // Size × Iters × 2, as ibv_rc_pingpong counts
	Iters         int
	Sends, Recvs  int // completions seen
	Elapsed       time.Duration
	Counters      verbs.Counters
}

// Summary returns ibv_rc_pingpong's two result lines.
func (r *Result) Summary() string {
	usec := float64(r.Elapsed.Nanoseconds()) / 1e3
	return fmt.Sprintf("%d bytes in %.2f seconds = %.2f Mbit/sec\n%d iters in %.2f seconds = %.2f usec/iter\n",
		r.Bytes, usec/1e6, float64(r.Bytes)*8/usec, r.Iters, usec/1e6, usec/float64(r.Iters))
}

// ctx holds one side's device, queue pair and buffers.
type side struct {
	cfg  Config
	dev  *softroce.Device
	pd   verbs.PD
	cq   verbs.CQ
	qp   verbs.QP
	buf  []byte // send half, then receive half
	mr   verbs.MR
	self Dest
}

func open(cfg Config, addr netip.AddrPort) (_ *side, err error) {
	dev, err := rocepeer.OpenDevice(addr)
	if err != nil {
		return nil, err
	}
	s := &side{cfg: cfg, dev: dev}
	defer func() {
		if err != nil {
			s.close()
		}
	}()
	if s.pd, err = dev.AllocPD(); err != nil {
		return nil, err
	}
	if s.cq, err = dev.CreateCQ(cfg.RxDepth + 1); err != nil {
		return nil, err
	}
	if s.qp, err = s.pd.CreateQP(&verbs.QPInitAttr{SendCQ: s.cq, RecvCQ: s.cq, Cap: verbs.QPCap{
		MaxSendWR: 1, MaxRecvWR: uint32(cfg.RxDepth), MaxSendSGE: 1, MaxRecvSGE: 1}}); err != nil {
		return nil, fmt.Errorf("create QP: %w", err)
	}
	if s.buf, err = verbs.AllocBuffer(2 * cfg.Size); err != nil {
		return nil, err
	}
	for i := range cfg.Size {
		s.buf[i] = byte(i)
	}
	if s.mr, err = s.pd.RegMR(s.buf, verbs.AccessLocalWrite); err != nil {
		return nil, fmt.Errorf("register %d bytes: %w", len(s.buf), err)
	}
	if err = verbs.InitRC(s.qp, 0); err != nil {
		return nil, err
	}
	s.self = Dest{QPN: s.qp.QPN(), PSN: rand.Uint32() & 0xffffff, GID: verbs.GIDFromAddr(dev.LocalAddr().Addr())}
	return s, nil
}

func (s *side) close() {
	// Device.Close closes the QP (which sends an ACK still owed for the
	// peer's last message) before the link, then the buffer can go.
	s.dev.Close()
	if s.buf != nil {
		verbs.FreeBuffer(s.buf)
		s.buf = nil
	}
}

// postRecv posts n receives into the receive half of the buffer.
func (s *side) postRecv(n int) (int, error) {
	sge := []verbs.SGE{{Addr: s.mr.Addr() + uint64(s.cfg.Size), Length: uint32(s.cfg.Size), LKey: s.mr.LKey()}}
	for i := range n {
		if _, err := s.qp.PostRecv([]verbs.RecvWR{{ID: recvWRID, SGL: sge}}); err != nil {
			return i, err
		}
	}
	return n, nil
}

func (s *side) postSend() error {
	_, err := s.qp.PostSend([]verbs.SendWR{{ID: sendWRID, Opcode: verbs.WRSend, Flags: verbs.SendSignaled,
		SGL: []verbs.SGE{{Addr: s.mr.Addr(), Length: uint32(s.cfg.Size), LKey: s.mr.LKey()}}}})
	return err
}

// connect moves the QP to RTR and RTS with ibv_rc_pingpong's attributes.
func (s *side) connect(rem Dest) error {
	if rem.GID == (verbs.GID{}) {
		return errors.New("peer sent an all-zero GID: RoCE needs one (run ibv_rc_pingpong with -g)")
	}
	return verbs.ConnectRC(s.qp, verbs.RCPeer{
		AH:      verbs.AH{DGID: rem.GID, HopLimit: 1, DPort: s.cfg.PeerRoCEPort},
		PathMTU: verbs.MTUFromBytes(s.cfg.MTU), DestQPN: rem.QPN, RQPSN: rem.PSN, SQPSN: s.self.PSN,
		MaxDestRdAtomic: 1, MaxRdAtomic: 1, MinRNRTimer: 12, Timeout: 14, RetryCnt: 7, RNRRetry: 7,
	})
}

// run is the ping-pong loop of ibv_rc_pingpong: a side sends its next
// message once its previous send completed and a message arrived; the
// client starts with a send. Receives are topped up when at most one is
// left posted.
func (s *side) run(ctx context.Context, client bool, res *Result) error {
	iters := s.cfg.Iters
	routs := s.cfg.RxDepth
	pending := recvWRID
	if client {
		if err := s.postSend(); err != nil {
			return fmt.Errorf("post send: %w", err)
		}
		pending |= sendWRID
	}
	start := time.Now()
	wcs := make([]verbs.WC, 16)
	for res.Recvs < iters || res.Sends < iters {
		wctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
		err := s.cq.Wait(wctx)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("no completion for %v after %d sends, %d receives: %w", s.cfg.Timeout, res.Sends, res.Recvs, err)
		}
		n, err := s.cq.Poll(wcs)
		if err != nil {
			return fmt.Errorf("poll CQ: %w", err)
		}
		for _, wc := range wcs[:n] {
			if wc.Status != verbs.WCSuccess {
				return fmt.Errorf("failed status %v (%d) for wr_id %d", wc.Status, wc.Status, wc.WRID)
			}
			switch wc.WRID {
			case sendWRID:
				res.Sends++
			case recvWRID:
				if wc.ByteLen != uint32(s.cfg.Size) {
					return fmt.Errorf("received %d bytes, want %d", wc.ByteLen, s.cfg.Size)
				}
				routs--
				if routs <= 1 {
					got, err := s.postRecv(s.cfg.RxDepth - routs)
					routs += got
					if routs < s.cfg.RxDepth {
						return fmt.Errorf("couldn't post receive (%d): %v", routs, err)
					}
				}
				res.Recvs++
			default:
				return fmt.Errorf("completion for unknown wr_id %d", wc.WRID)
			}
			pending &^= int(wc.WRID)
			if res.Sends < iters && pending == 0 {
				if err := s.postSend(); err != nil {
					return fmt.Errorf("post send: %w", err)
				}
				pending = recvWRID | sendWRID
			}
		}
	}
	res.Elapsed = time.Since(start)
	res.Iters = iters
	res.Bytes = int64(s.cfg.Size) * int64(iters) * 2
	if s.cfg.Linger > 0 {
		select {
		case <-time.After(s.cfg.Linger):
		case <-ctx.Done():
		}
	}
	return nil
}

// deadline bounds conn's I/O by ctx and the timeout; the returned stop
// lifts it.
func deadline(ctx context.Context, conn net.Conn, d time.Duration) (stop func()) {
	conn.SetDeadline(time.Now().Add(d))
	unwatch := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	return func() { unwatch(); conn.SetDeadline(time.Time{}) }
}

// Client runs the client side over conn, a TCP connection to an
// ibv_rc_pingpong-compatible server.
func Client(ctx context.Context, conn net.Conn, cfg Config) (*Result, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	addr, err := rocepeer.ForConn(cfg.RoCE, conn)
	if err != nil {
		return nil, fmt.Errorf("rcpingpong: %w", err)
	}
	s, err := open(cfg, addr)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if got, err := s.postRecv(cfg.RxDepth); err != nil {
		return nil, fmt.Errorf("couldn't post receive (%d): %w", got, err)
	}
	res := &Result{Local: s.self}
	fmt.Fprintf(cfg.Log, "  local address:  %v\n", s.self)

	stop := deadline(ctx, conn, cfg.Timeout)
	msg := s.self.Marshal()
	if _, err := conn.Write(msg[:]); err != nil {
		stop()
		return nil, fmt.Errorf("couldn't send local address: %w", err)
	}
	var in [MsgLen]byte
	if _, err := io.ReadFull(conn, in[:]); err != nil {
		stop()
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	if _, err := io.WriteString(conn, doneMsg); err != nil {
		stop()
		return nil, fmt.Errorf("couldn't send done: %w", err)
	}
	stop()
	if res.Remote, err = ParseDest(in[:]); err != nil {
		return nil, err
	}
	fmt.Fprintf(cfg.Log, "  remote address: %v\n", res.Remote)
	if err := s.connect(res.Remote); err != nil {
		return nil, err
	}
	err = s.run(ctx, true, res)
	res.Counters = s.dev.Counters()
	return res, err
}

// Server runs the server side over conn, an accepted TCP connection from
// an ibv_rc_pingpong-compatible client.
func Server(ctx context.Context, conn net.Conn, cfg Config) (*Result, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	stop := deadline(ctx, conn, cfg.Timeout)
	defer stop()
	var in [MsgLen]byte
	if _, err := io.ReadFull(conn, in[:]); err != nil {
		return nil, fmt.Errorf("couldn't read remote address: %w", err)
	}
	rem, err := ParseDest(in[:])
	if err != nil {
		return nil, err
	}
	if rem.GID == (verbs.GID{}) {
		return nil, errors.New("peer sent an all-zero GID: RoCE needs one (run ibv_rc_pingpong with -g)")
	}
	// The device opens only now: without -roce its address is the one
	// that routes to the client's GID. Receives are posted before the
	// reply, so they are ready for the client's first message.
	addr, err := rocepeer.For(cfg.RoCE, rem.GID.Addr())
	if err != nil {
		return nil, err
	}
	s, err := open(cfg, addr)
	if err != nil {
		return nil, err
	}
	defer s.close()
	if got, err := s.postRecv(cfg.RxDepth); err != nil {
		return nil, fmt.Errorf("couldn't post receive (%d): %w", got, err)
	}
	res := &Result{Local: s.self, Remote: rem}
	fmt.Fprintf(cfg.Log, "  local address:  %v\n", s.self)
	fmt.Fprintf(cfg.Log, "  remote address: %v\n", rem)
	if err := s.connect(rem); err != nil {
		return nil, err
	}
	msg := s.self.Marshal()
	if _, err := conn.Write(msg[:]); err != nil {
		return nil, fmt.Errorf("couldn't send local address: %w", err)
	}
	var done [len(doneMsg)]byte
	if _, err := io.ReadFull(conn, done[:]); err != nil {
		return nil, fmt.Errorf("couldn't read done: %w", err)
	}
	stop()
	err = s.run(ctx, false, res)
	res.Counters = s.dev.Counters()
	return res, err
}
