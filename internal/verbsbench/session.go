package verbsbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/verbs"
)

// ErrPeer wraps failures reported by, or caused by the loss of, the other
// side.
var ErrPeer = errors.New("peer")

// frame is one control frame or the error that ended reading.
type frame struct {
	t   FrameType
	p   []byte
	err error
}

// readOne reads one frame from conn in a goroutine and delivers it.
func readOne(conn net.Conn) <-chan frame {
	ch := make(chan frame, 1)
	go func() {
		t, p, err := ReadFrame(conn)
		ch <- frame{t, p, err}
	}()
	return ch
}

// cancelOnContext makes every blocked and future I/O on conn fail once ctx
// is done. Call the returned function to stop that.
func cancelOnContext(ctx context.Context, conn net.Conn) func() bool {
	return context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
}

// sendError tells the peer why this side gives up (best effort).
func sendError(conn net.Conn, err error) {
	conn.SetWriteDeadline(time.Now().Add(time.Second))
	WriteFrame(conn, FrameError, ErrorText(err.Error()))
	conn.SetWriteDeadline(time.Time{})
}

// peerError describes an unexpected frame or a read failure of the
// control connection.
func peerError(who string, f frame) error {
	switch {
	case f.err != nil && errors.Is(f.err, io.EOF):
		return fmt.Errorf("%w: %s closed the control connection", ErrPeer, who)
	case f.err != nil && errors.Is(f.err, ErrProtocol):
		return fmt.Errorf("%w: %s: %w", ErrPeer, who, f.err)
	case f.err != nil && errors.Is(f.err, os.ErrDeadlineExceeded):
		return fmt.Errorf("%w: timed out waiting for %s", ErrPeer, who)
	case f.err != nil:
		return fmt.Errorf("%w: control connection to %s lost: %w", ErrPeer, who, f.err)
	case f.t == FrameError:
		return fmt.Errorf("%w: %s failed: %s", ErrPeer, who, f.p)
	}
	return fmt.Errorf("%w: %s: %w: unexpected %v frame", ErrPeer, who, ErrProtocol, f.t)
}

// watchdog cancels ctx with a timeout error when the device receives no
// packet for timeout. It returns a function that stops it.
func watchdog(cancel context.CancelCauseFunc, dev interface{ Counters() verbs.Counters }, timeout time.Duration) func() {
	stop := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		tick := time.NewTicker(min(timeout/4, 250*time.Millisecond))
		defer tick.Stop()
		last, since := dev.Counters().RecvPackets, time.Now()
		for {
			select {
			case <-stop:
				return
			case now := <-tick.C:
				if n := dev.Counters().RecvPackets; n != last {
					last, since = n, now
				} else if now.Sub(since) >= timeout {
					cancel(fmt.Errorf("timeout: no RoCE packet from the peer for %v", timeout))
					return
				}
			}
		}
	}()
	return func() { close(stop); <-exited }
}

// Run runs one test as the client over the control connection conn to a
// server in Serve, and returns its result. conn may carry further tests
// afterwards, or Bye; after an error it should be closed.
func Run(ctx context.Context, conn net.Conn, cfg Config) (*Result, error) {
	if !cfg.Test.Valid() {
		return nil, fmt.Errorf("unknown test %v", cfg.Test)
	}
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	p := cfg.params()
	ep, err := openEndpoint(cfg.Provider, cfg.RoCE, &p, clientSeed)
	if err != nil {
		return nil, err
	}
	defer ep.close()
	ep.describe(&p)

	stop := cancelOnContext(ctx, conn)
	defer stop()
	conn.SetDeadline(time.Now().Add(cfg.Timeout))
	if err := WriteFrame(conn, FrameHello, p.Encode()); err != nil {
		return nil, fmt.Errorf("%w: send Hello to server: %w", ErrPeer, err)
	}
	f := <-readOne(conn)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if f.err != nil || f.t != FrameAccept {
		return nil, peerError("server", f)
	}
	peer, err := DecodeParams(f.p)
	if err == nil && !peer.sameTest(&p) {
		err = fmt.Errorf("%w: server accepted different test settings", ErrProtocol)
	}
	if err != nil {
		sendError(conn, err)
		return nil, fmt.Errorf("%w: server: %w", ErrPeer, err)
	}
	conn.SetDeadline(time.Time{})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := ep.connect(&peer); err != nil {
		sendError(conn, err)
		return nil, err
	}

	// From here on the server sends nothing until our Done, except an
	// Error; anything on the connection ends the test.
	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	fc := make(chan frame, 1)
	go func() {
		f := <-readOne(conn)
		if f.err != nil || f.t != FrameReport {
			cancel(peerError("server", f))
		}
		fc <- f
	}()
	stopDog := watchdog(cancel, ep.dev, cfg.Timeout)
	u0, s0 := proccpu.Times()
	var m measured
	if p.Test.Latency() {
		m, err = ep.runPing(tctx, &p, &peer)
	} else {
		m, err = ep.runBW(tctx, &p, &peer)
	}
	u1, s1 := proccpu.Times()
	stopDog()
	var verified uint64
	if err == nil && p.Test == TestReadBW {
		verified, err = ep.checkSlots(m.msgs, serverSeed)
	}
	if err != nil {
		if c := context.Cause(tctx); c != nil && tctx.Err() != nil {
			err = c
		}
		sendError(conn, err)
		conn.SetReadDeadline(time.Unix(1, 0))
		<-fc
		return nil, err
	}
	conn.SetReadDeadline(time.Now().Add(cfg.Timeout))
	done := Done{Msgs: m.msgs, Bytes: m.msgs * uint64(p.Size)}
	if err := WriteFrame(conn, FrameDone, done.Encode()); err != nil {
		conn.SetReadDeadline(time.Unix(1, 0))
		<-fc
		return nil, fmt.Errorf("%w: send Done to server: %w", ErrPeer, err)
	}
	f = <-fc
	if f.err != nil || f.t != FrameReport {
		return nil, peerError("server", f)
	}
	conn.SetDeadline(time.Time{})
	rep, err := DecodeReport(f.p)
	if err != nil {
		return nil, fmt.Errorf("%w: server: %w", ErrPeer, err)
	}
	switch p.Test {
	case TestSendBW, TestWriteLat:
		if rep.Msgs != done.Msgs || rep.Bytes != done.Bytes {
			return nil, fmt.Errorf("server received %d messages, %d bytes; client completed %d, %d bytes",
				rep.Msgs, rep.Bytes, done.Msgs, done.Bytes)
		}
	}
	retrans, timeouts, rnr := ep.counters()
	r := newResult(&p, m)
	r.Transport = ep.transport()
	r.LocalRoCE = ep.roceAddr().String()
	r.PeerRoCE = netip.AddrPortFrom(peer.GID.Addr(), peer.Port).String()
	r.Retransmits = retrans + rep.Retransmits
	r.Timeouts = timeouts + rep.Timeouts
	r.RNRNAKs = rnr + rep.RNRNAKs
	r.CPUUser, r.CPUSys = (u1 - u0).Seconds(), (s1 - s0).Seconds()
	r.ServerCPUUser, r.ServerCPUSys = rep.CPUUser.Seconds(), rep.CPUSys.Seconds()
	r.ServerMsgs, r.ServerBytes = rep.Msgs, rep.Bytes
	r.VerifiedBytes = verified + rep.Verified
	return r, nil
}

// Bye ends a session after the last test.
func Bye(conn net.Conn) error {
	conn.SetWriteDeadline(time.Now().Add(DefaultTimeout))
	defer conn.SetWriteDeadline(time.Time{})
	return WriteFrame(conn, FrameBye, nil)
}

// ServerConfig configures Serve.
type ServerConfig struct {
	// Provider is the verbs provider, as in Config.
	Provider string
	// RoCE is the local address of the soft-RoCE UDP link; port 0 means
	// 4791 if free, else an ephemeral port. Default 127.0.0.1:0. With
	// another provider its IP selects the device, as in Config.
	RoCE netip.AddrPort
	// Timeout bounds the wait for each Hello, for the client's first
	// packets, and any stretch without a received packet. Default
	// DefaultTimeout.
	Timeout time.Duration
	// OnTest, if set, is called after each test the server ran, with its
	// parameters and report, or the error that ended it.
	OnTest func(p Params, r Report, err error)
}

// Serve is the server side of a session on conn: it runs the tests the
// client asks for until the client says Bye or closes the connection
// between tests (nil), or a test fails (the error). It does not close conn.
func Serve(ctx context.Context, conn net.Conn, cfg ServerConfig) error {
	if !cfg.RoCE.IsValid() {
		cfg.RoCE = netip.MustParseAddrPort(DefaultRoCEAddr)
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	stop := cancelOnContext(ctx, conn)
	defer stop()
	for {
		conn.SetReadDeadline(time.Now().Add(cfg.Timeout))
		t, payload, err := ReadFrame(conn)
		if err == nil && t == FrameBye {
			return nil
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil || t != FrameHello {
			if c := ctx.Err(); c != nil {
				return c
			}
			err = peerError("client", frame{t, payload, err})
			if t != FrameError {
				sendError(conn, err)
			}
			return err
		}
		p, r, err := serveTest(ctx, conn, payload, &cfg)
		if cfg.OnTest != nil {
			cfg.OnTest(p, r, err)
		}
		if err != nil {
			return err
		}
	}
}

// serveTest runs the server side of one test, from a Hello payload.
func serveTest(ctx context.Context, conn net.Conn, hello []byte, cfg *ServerConfig) (Params, Report, error) {
	var r Report
	peer, err := DecodeParams(hello)
	if err != nil {
		sendError(conn, err)
		return peer, r, fmt.Errorf("%w: client: %w", ErrPeer, err)
	}
	p := peer
	ep, err := openEndpoint(cfg.Provider, cfg.RoCE, &p, serverSeed)
	if err != nil {
		sendError(conn, err)
		return p, r, err
	}
	defer ep.close()
	if err := ep.connect(&peer); err != nil {
		sendError(conn, err)
		return p, r, err
	}
	// Receives go up before Accept: the client starts sending at once.
	switch p.Test {
	case TestSendBW:
		err = ep.postRecvs(0, p.RxDepth, true)
	case TestWriteLat:
		err = ep.postRecvs(0, p.RxDepth, false)
	}
	if err != nil {
		sendError(conn, err)
		return p, r, err
	}
	ep.describe(&p)
	conn.SetWriteDeadline(time.Now().Add(cfg.Timeout))
	if err := WriteFrame(conn, FrameAccept, p.Encode()); err != nil {
		return p, r, fmt.Errorf("%w: send Accept to client: %w", ErrPeer, err)
	}
	conn.SetDeadline(time.Time{})

	tctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	wctx, wcancel := context.WithCancel(tctx)
	defer wcancel()
	s := &serverRun{ctx: tctx, waitCtx: wctx, doneC: make(chan struct{}), grace: min(cfg.Timeout, 2*time.Second)}
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		f := <-readOne(conn)
		if f.err == nil && f.t == FrameDone {
			d, err := DecodeDone(f.p)
			if err == nil {
				s.done = d
				close(s.doneC)
				wcancel()
				return
			}
			f.err = err
		}
		cancel(peerError("client", f))
	}()
	stopDog := watchdog(cancel, ep.dev, cfg.Timeout)
	u0, s0 := proccpu.Times()
	switch p.Test {
	case TestSendBW:
		r, err = ep.runRecv(s, &p)
	case TestWriteLat:
		r, err = ep.runPong(s, &p, &peer)
	default:
		_, err = s.waitDone()
	}
	u1, s1 := proccpu.Times()
	stopDog()
	if err == nil && (p.Test == TestWriteBW || p.Test == TestSendBW) {
		r.Verified, err = ep.checkSlots(s.done.Msgs, clientSeed)
	}
	if err != nil {
		if c := context.Cause(tctx); c != nil && tctx.Err() != nil && !errors.Is(c, context.Canceled) {
			err = c
		}
		if !errors.Is(err, ErrPeer) {
			sendError(conn, err)
		}
		conn.SetReadDeadline(time.Unix(1, 0))
		<-exited
		return p, r, err
	}
	<-exited
	r.Retransmits, r.Timeouts, r.RNRNAKs = ep.counters()
	r.CPUUser, r.CPUSys = u1-u0, s1-s0
	conn.SetWriteDeadline(time.Now().Add(cfg.Timeout))
	if err := WriteFrame(conn, FrameReport, r.Encode()); err != nil {
		return p, r, fmt.Errorf("%w: send Report to client: %w", ErrPeer, err)
	}
	conn.SetDeadline(time.Time{})
	return p, r, nil
}
