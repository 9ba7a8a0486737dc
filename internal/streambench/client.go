package streambench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/netconn"
)

// ClientConfig configures Dial.
type ClientConfig struct {
	// Addr is the server's main address: the control connection and
	// rsock data connections go there.
	Addr string
	// TCPAddr is the server's plain TCP address; empty means Addr's host
	// with the port the server announces.
	TCPAddr string
	// Provider is the netconn provider of rsock data connections; empty
	// means the library's default ($RSOCK_PROVIDER, else auto).
	Provider string
	// Link is the netconn link of rsock data connections (auto, udp,
	// memif, dpdk); empty means $RSOCK_LINK, else auto.
	Link string
	// Timeout bounds each wait for the server; default DefaultTimeout.
	Timeout time.Duration
	// TCPCongestion, if set, is the congestion control of the plain TCP
	// data connections (TCP_CONGESTION on Linux: reno, cubic, bbr, as
	// loaded); empty leaves the system's default.
	TCPCongestion string
}

// Client is one session with a server: a control connection over which
// it runs measurements one after another. It is not safe for concurrent
// use.
type Client struct {
	cfg       ClientConfig
	ctl       net.Conn
	session   uint64
	tcpAddr   string
	verifying bool
	next      uint32
	broken    error
}

// Dial opens a session with the server at cfg.Addr.
func Dial(ctx context.Context, cfg ClientConfig) (*Client, error) {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	host, _, err := net.SplitHostPort(cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("server address %q: %w", cfg.Addr, err)
	}
	d := net.Dialer{Timeout: cfg.Timeout}
	ctl, err := d.DialContext(ctx, "tcp", cfg.Addr)
	if err != nil {
		return nil, fmt.Errorf("connect to server: %w", err)
	}
	c := &Client{cfg: cfg, ctl: ctl, next: 1}
	ctl.SetDeadline(time.Now().Add(cfg.Timeout))
	if err := WriteFrame(ctl, FrameHello, nil); err != nil {
		ctl.Close()
		return nil, fmt.Errorf("connect to server: %w", err)
	}
	m, err := c.expect(FrameWelcome)
	if err != nil {
		ctl.Close()
		return nil, fmt.Errorf("connect to server: %w", err)
	}
	ctl.SetDeadline(time.Time{})
	c.session, c.verifying = m.Session, m.Verify
	c.tcpAddr = cfg.TCPAddr
	if c.tcpAddr == "" {
		c.tcpAddr = net.JoinHostPort(host, strconv.Itoa(m.TCPPort))
	}
	return c, nil
}

// ServerVerifies reports whether the server demands verification.
func (c *Client) ServerVerifies() bool { return c.verifying }

// TCPAddr is the address the client's plain TCP data connections go to.
func (c *Client) TCPAddr() string { return c.tcpAddr }

// Close ends the session and closes the control connection.
func (c *Client) Close() error {
	var err error
	if c.broken == nil {
		c.ctl.SetDeadline(time.Now().Add(c.cfg.Timeout))
		err = WriteFrame(c.ctl, FrameBye, nil)
	}
	if cerr := c.ctl.Close(); err == nil {
		err = cerr
	}
	return err
}

// expect reads the next control frame, which must be of type want; an
// Error frame becomes an error.
func (c *Client) expect(want FrameType) (*Message, error) {
	t, m, err := ReadFrame(c.ctl)
	if err != nil {
		if errors.Is(err, io.EOF) {
			err = errors.New("the server closed the control connection")
		}
		return nil, err
	}
	if t == FrameError {
		return nil, fmt.Errorf("server: %s", m.Error)
	}
	if t != want {
		return nil, protoErr("got %v, want %v", t, want)
	}
	return m, nil
}

// Point describes one measurement.
type Point struct {
	Mode      string // ModeStream or ModePingPong
	Transport string // TransportRsock or TransportTCP
	Size      int    // bytes per write (stream) or per message (ping-pong)
	Conns     int    // data connections, each running the same traffic

	// Duration is how long the traffic runs (stream without Bytes, and
	// ping-pong).
	Duration time.Duration
	// Iters caps the round trips of each ping-pong connection; 0: none.
	Iters int
	// Bytes, if positive, makes a stream send exactly this many bytes on
	// each connection instead of running for Duration.
	Bytes int64

	// Verify sends the deterministic Pattern of Seed, and has the server
	// check every byte.
	Verify bool
	Seed   uint64
	// Corrupt flips the byte at offset CorruptAt of connection 0's
	// stream after it is generated: a test of verification.
	Corrupt   bool
	CorruptAt int64
}

func (p *Point) check() error {
	switch {
	case p.Mode != ModeStream && p.Mode != ModePingPong:
		return fmt.Errorf("unknown mode %q", p.Mode)
	case p.Transport != TransportRsock && p.Transport != TransportTCP:
		return fmt.Errorf("unknown transport %q", p.Transport)
	case p.Size <= 0 || p.Size > MaxSize:
		return fmt.Errorf("size %d not in 1..%d", p.Size, MaxSize)
	case p.Conns <= 0 || p.Conns > MaxConns:
		return fmt.Errorf("conns %d not in 1..%d", p.Conns, MaxConns)
	case p.Bytes < 0 || p.Duration < 0 || p.Iters < 0:
		return errors.New("negative bytes, duration or iterations")
	case p.Bytes == 0 && p.Duration == 0 && (p.Mode == ModeStream || p.Iters == 0):
		return errors.New("give a duration (or bytes for a stream, iterations for ping-pong)")
	}
	return nil
}

// workerResult is what one client data connection did.
type workerResult struct {
	sent  uint64
	rtts  []time.Duration
	iters uint64
	err   error
}

// Measure runs one measurement and returns its record. A *MismatchError
// from the server is returned as it is. After an error other than a
// mismatch the session is unusable.
func (c *Client) Measure(ctx context.Context, p Point) (*Record, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	if c.broken != nil {
		return nil, fmt.Errorf("session failed earlier: %w", c.broken)
	}
	rec, err := c.measure(ctx, &p)
	var mm *MismatchError
	if err != nil && !errors.As(err, &mm) {
		c.broken = err
		c.ctl.Close()
	}
	return rec, err
}

func (c *Client) measure(ctx context.Context, p *Point) (*Record, error) {
	stop := context.AfterFunc(ctx, func() { c.ctl.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	id := c.next
	c.next++
	c.ctl.SetDeadline(time.Now().Add(c.cfg.Timeout))
	start := &Message{ID: id, Mode: p.Mode, Transport: p.Transport, Size: p.Size, Conns: p.Conns, Verify: p.Verify, Seed: p.Seed}
	if err := WriteFrame(c.ctl, FrameStart, start); err != nil {
		return nil, err
	}
	if _, err := c.expect(FrameReady); err != nil {
		return nil, err
	}
	conns, err := c.dialData(ctx, p, id)
	defer func() {
		for _, dc := range conns {
			dc.Close()
		}
	}()
	if err != nil {
		WriteFrame(c.ctl, FrameError, &Message{Error: truncate(err.Error(), MaxErrorText)})
		return nil, err
	}
	connTransport, fallbackReason := "tcp", ""
	if tc, ok := conns[0].(interface{ Transport() string }); ok {
		connTransport = tc.Transport()
	}
	if fc, ok := conns[0].(interface{ FallbackReason() string }); ok {
		fallbackReason = fc.FallbackReason()
	}
	if err := WriteFrame(c.ctl, FrameGo, nil); err != nil {
		return nil, err
	}
	if _, err := c.expect(FrameStarted); err != nil {
		return nil, err
	}
	// No deadline while the traffic runs: a stream of Bytes takes as long
	// as it takes. The server's Report follows the drain.
	c.ctl.SetDeadline(time.Time{})

	// The server reports early when the traffic must stop (a mismatch):
	// then the data connections are cut, which ends the workers.
	type frame struct {
		t   FrameType
		m   *Message
		err error
	}
	early := make(chan frame, 1)
	go func() {
		t, m, err := ReadFrame(c.ctl)
		early <- frame{t, m, err}
	}()
	u0, s0 := proccpu.Times()
	t0 := time.Now()
	results := make([]workerResult, len(conns))
	var wg sync.WaitGroup
	for i, dc := range conns {
		wg.Go(func() { c.work(ctx, dc, p, i, t0, &results[i]) })
	}
	workersDone := make(chan struct{})
	go func() { wg.Wait(); close(workersDone) }()
	var rf frame
	got := false
	select {
	case <-workersDone:
	case rf = <-early:
		got = true
		for _, dc := range conns {
			dc.SetDeadline(time.Unix(1, 0))
		}
		<-workersDone
	}
	if err := ctx.Err(); err != nil && !got {
		// Interrupted: no Report is coming soon (the data may be
		// stuck), and Measure closes the session.
		return nil, err
	}
	elapsed := time.Since(t0)
	var sent uint64
	for _, r := range results {
		sent += r.sent
	}
	c.ctl.SetDeadline(time.Now().Add(c.cfg.Timeout + time.Duration(len(conns))*time.Second))
	if err := WriteFrame(c.ctl, FrameFinish, &Message{Sent: sent}); err != nil && !got {
		return nil, err // Measure closes ctl, which ends the reader
	}
	if !got {
		rf = <-early
	}
	if rf.err == nil && rf.t == FrameError {
		rf.err = fmt.Errorf("server: %s", rf.m.Error)
	} else if rf.err == nil && rf.t != FrameReport {
		rf.err = protoErr("got %v, want Report", rf.t)
	}
	if rf.err != nil {
		return nil, rf.err
	}
	rep := rf.m
	u1, s1 := proccpu.Times()
	if rep.Mismatch != nil {
		return nil, rep.Mismatch
	}
	if rep.Error != "" {
		return nil, fmt.Errorf("server: %s", rep.Error)
	}
	for i, r := range results {
		if r.err != nil {
			return nil, fmt.Errorf("data connection %d: %w", i, r.err)
		}
	}
	if rep.Received != sent {
		return nil, fmt.Errorf("the server received %d bytes, the client sent %d", rep.Received, sent)
	}

	rec := &Record{Transport: p.Transport, ConnTransport: connTransport, FallbackReason: fallbackReason, ServerTransport: rep.ServerTransport,
		Mode: p.Mode, Size: p.Size, Conns: p.Conns, VerifiedBytes: rep.Verified,
		ClientCPUSeconds: (u1 - u0 + s1 - s0).Seconds(), ServerCPUSeconds: rep.CPUUser + rep.CPUSys}
	if p.Mode == ModeStream {
		rec.Bytes, rec.Seconds = rep.Received, rep.Seconds
	} else {
		var rtts []time.Duration
		for _, r := range results {
			rtts = append(rtts, r.rtts...)
			rec.RoundTrips += r.iters
		}
		rec.Bytes = 2 * sent
		rec.Seconds = elapsed.Seconds()
		rec.setLatencies(rtts)
	}
	rec.finish()
	return rec, nil
}

// dialData opens the measurement's data connections and sends their
// headers. It returns the connections opened, also on error.
func (c *Client) dialData(ctx context.Context, p *Point, id uint32) ([]net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	conns := make([]net.Conn, 0, p.Conns)
	for i := range p.Conns {
		var dc net.Conn
		var err error
		if p.Transport == TransportRsock {
			// The handshake may take as long as any wait for the server:
			// on a lossy path TCP resends its segments after backoffs
			// that add up to seconds.
			d := netconn.Dialer{Provider: c.cfg.Provider, Link: c.cfg.Link, HandshakeTimeout: c.cfg.Timeout}
			dc, err = d.DialContext(ctx, "tcp", c.cfg.Addr)
		} else {
			var d net.Dialer
			if c.cfg.TCPCongestion != "" {
				d.Control = tcpCongestionControl(c.cfg.TCPCongestion)
			}
			dc, err = d.DialContext(ctx, "tcp", c.tcpAddr)
		}
		if err != nil {
			return conns, fmt.Errorf("dial %s data connection %d: %w", p.Transport, i, err)
		}
		conns = append(conns, dc)
		dc.SetWriteDeadline(time.Now().Add(c.cfg.Timeout))
		if _, err := dc.Write(DataHeader{Session: c.session, ID: id, Index: uint32(i)}.Append(nil)); err != nil {
			return conns, fmt.Errorf("data connection %d header: %w", i, err)
		}
		dc.SetWriteDeadline(time.Time{})
	}
	return conns, nil
}

// work runs one data connection's traffic, then closes its writing side.
func (c *Client) work(ctx context.Context, dc net.Conn, p *Point, index int, t0 time.Time, res *workerResult) {
	stop := context.AfterFunc(ctx, func() { dc.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	defer func() {
		if cw, ok := dc.(interface{ CloseWrite() error }); ok && res.err == nil {
			res.err = cw.CloseWrite()
		}
	}()
	var pat *Pattern
	if p.Verify {
		pat = NewPattern(p.Seed, index)
	}
	buf := make([]byte, p.Size)
	if pat == nil {
		NewPattern(p.Seed, index).Fill(buf) // incompressible, same for every write
	}
	// next fills buf[:n] with the next n bytes of the stream.
	next := func(n int) []byte {
		b := buf[:n]
		if pat == nil {
			return b
		}
		off := pat.Offset()
		pat.Fill(b)
		if p.Corrupt && index == 0 && p.CorruptAt >= off && p.CorruptAt < off+int64(n) {
			b[p.CorruptAt-off] ^= 0xFF
		}
		return b
	}
	deadline := t0.Add(p.Duration)
	if p.Mode == ModeStream {
		remaining := p.Bytes
		for {
			n := p.Size
			if p.Bytes > 0 {
				if remaining == 0 {
					return
				}
				n = int(min(int64(n), remaining))
				remaining -= int64(n)
			} else if !time.Now().Before(deadline) {
				return
			}
			m, err := dc.Write(next(n))
			res.sent += uint64(m)
			if err != nil {
				res.err = err
				return
			}
		}
	}
	in := make([]byte, p.Size)
	for p.Iters == 0 || res.iters < uint64(p.Iters) {
		if p.Duration > 0 && !time.Now().Before(deadline) {
			return
		}
		out := next(p.Size)
		t := time.Now()
		m, err := dc.Write(out)
		res.sent += uint64(m)
		if err != nil {
			res.err = err
			return
		}
		if _, err := io.ReadFull(dc, in); err != nil {
			res.err = err
			return
		}
		res.rtts = append(res.rtts, time.Since(t))
		res.iters++
		if pat != nil && !bytes.Equal(in, out) {
			res.err = errors.New("the echo differs from the message sent")
			return
		}
	}
}
