package streambench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/rsock-go/rsock/internal/proccpu"
)

// DefaultTimeout bounds each wait of a client or server when the config
// gives none: for a control reply, for the data connections of a
// measurement, and for the data still in flight after the client finishes.
const DefaultTimeout = 10 * time.Second

// readBufSize is what a stream receiver reads at a time.
const readBufSize = 256 << 10

// ServerConfig configures Serve.
type ServerConfig struct {
	// Verify demands that clients verify every measurement, and makes
	// Serve return the first *MismatchError (after reporting it to the
	// client). Without it the server still checks the measurements a
	// client asks to verify, and reports mismatches only to that client.
	Verify bool
	// Sessions makes Serve return after this many client sessions
	// ended; 0 serves until ctx is done.
	Sessions int
	// Timeout bounds waits for data connections and their headers;
	// default DefaultTimeout.
	Timeout time.Duration
	// Log, if set, gets one line per measurement and session.
	Log io.Writer
}

// server is the state of one Serve call.
type server struct {
	cfg     ServerConfig
	tcpPort int
	ctx     context.Context

	mu       sync.Mutex
	sessions map[uint64]*session
	conns    map[net.Conn]struct{} // open conns not yet owned by a session or measurement
	logMu    sync.Mutex
}

// Serve serves benchmark clients: control and rsock data connections on
// rsockLn (normally a netconn listener), plain TCP data connections on
// tcpLn. It returns when ctx is done (nil), when cfg.Sessions sessions
// have ended (nil), on the first mismatch with cfg.Verify (the
// *MismatchError), or when a listener fails. It closes both listeners
// and every connection before it returns.
func Serve(ctx context.Context, rsockLn, tcpLn net.Listener, cfg ServerConfig) error {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	ta, ok := tcpLn.Addr().(*net.TCPAddr)
	if !ok {
		return fmt.Errorf("streambench: TCP listener address %v is not TCP", tcpLn.Addr())
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s := &server{cfg: cfg, tcpPort: ta.Port, ctx: ctx, sessions: make(map[uint64]*session), conns: make(map[net.Conn]struct{})}

	ended := make(chan error, 16) // a session's end: nil, or what stops the server
	var wg sync.WaitGroup
	acceptErr := make(chan error, 2)
	for _, ln := range []net.Listener{rsockLn, tcpLn} {
		wg.Go(func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					acceptErr <- err
					return
				}
				if !s.track(c) {
					c.Close()
					continue
				}
				wg.Go(func() { s.dispatch(c, ended) })
			}
		})
	}

	var result error
	done := 0
loop:
	for {
		select {
		case <-ctx.Done():
			break loop
		case err := <-acceptErr:
			if ctx.Err() == nil {
				result = fmt.Errorf("accept: %w", err)
			}
			break loop
		case err := <-ended:
			if err != nil {
				result = err
				break loop
			}
			done++
			if cfg.Sessions > 0 && done >= cfg.Sessions {
				break loop
			}
		}
	}
	cancel()
	rsockLn.Close()
	tcpLn.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	wg.Wait()
	return result
}

func (s *server) logf(format string, args ...any) {
	if s.cfg.Log == nil {
		return
	}
	s.logMu.Lock()
	defer s.logMu.Unlock()
	fmt.Fprintf(s.cfg.Log, format+"\n", args...)
}

// track records a conn so that shutdown closes it; false once shut down.
func (s *server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ctx.Err() != nil {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

func (s *server) untrack(c net.Conn) {
	s.mu.Lock()
	delete(s.conns, c)
	s.mu.Unlock()
}

// dispatch reads the first bytes of a connection and serves it as a
// control connection or attaches it to its measurement.
func (s *server) dispatch(c net.Conn, ended chan<- error) {
	var hdr [DataHeaderLen]byte
	c.SetReadDeadline(time.Now().Add(s.cfg.Timeout))
	if _, err := io.ReadFull(c, hdr[:4]); err != nil {
		s.untrack(c)
		c.Close()
		return
	}
	if [4]byte(hdr[:4]) == ctlMagic {
		c.SetReadDeadline(time.Time{})
		opened, err := s.serveSession(c, io.MultiReader(bytes.NewReader(hdr[:4]), c))
		s.untrack(c)
		c.Close()
		if !opened {
			return // not a client session: it does not count
		}
		var mm *MismatchError
		var result error
		if errors.As(err, &mm) && s.cfg.Verify {
			result = err
		} else if err != nil {
			s.logf("session from %v failed: %v", c.RemoteAddr(), err)
		}
		select {
		case ended <- result:
		case <-s.ctx.Done():
		}
		return
	}
	_, err := io.ReadFull(c, hdr[4:])
	var h DataHeader
	if err == nil {
		h, err = ParseDataHeader(hdr)
	}
	s.untrack(c)
	if err != nil || c.SetReadDeadline(time.Time{}) != nil || !s.attach(h, c) {
		c.Close()
	}
}

// session is one client's control connection and its measurement in
// progress.
type session struct {
	id   uint64
	mu   sync.Mutex
	meas *measurement
}

// measurement is the server's side of one measurement.
type measurement struct {
	start Message
	conns []net.Conn
	n     int
	all   chan struct{} // closed when every data connection arrived
	ended bool          // no more attachments; conns are closed by the owner
}

// attach hands a data connection to its measurement.
func (s *server) attach(h DataHeader, c net.Conn) bool {
	s.mu.Lock()
	sess := s.sessions[h.Session]
	s.mu.Unlock()
	if sess == nil {
		return false
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	m := sess.meas
	if m == nil || m.ended || m.start.ID != h.ID || int(h.Index) >= len(m.conns) || m.conns[h.Index] != nil {
		return false
	}
	m.conns[h.Index] = c
	m.n++
	if m.n == len(m.conns) {
		close(m.all)
	}
	return true
}

// newSessionID returns a random non-zero session identifier.
func newSessionID() uint64 {
	for {
		var b [8]byte
		rand.Read(b[:])
		if id := binary.BigEndian.Uint64(b[:]); id != 0 {
			return id
		}
	}
}

// serveSession runs one client session on control connection c, read
// through r. opened is false when c did not start with a Hello. It returns
// nil after Bye, the *MismatchError of a failed verification, or what went
// wrong.
func (s *server) serveSession(c net.Conn, r io.Reader) (opened bool, _ error) {
	stop := context.AfterFunc(s.ctx, func() { c.Close() })
	defer stop()
	c.SetReadDeadline(time.Now().Add(s.cfg.Timeout))
	t, _, err := ReadFrame(r)
	if err != nil {
		return false, err
	}
	if t != FrameHello {
		return false, protoErr("session opened with %v, want Hello", t)
	}
	c.SetReadDeadline(time.Time{})
	sess := &session{id: newSessionID()}
	s.mu.Lock()
	s.sessions[sess.id] = sess
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.sessions, sess.id)
		s.mu.Unlock()
	}()
	s.logf("session %x from %v", sess.id, c.RemoteAddr())
	if err := WriteFrame(c, FrameWelcome, &Message{Session: sess.id, TCPPort: s.tcpPort, Verify: s.cfg.Verify}); err != nil {
		return true, err
	}
	for {
		t, m, err := ReadFrame(r)
		if err != nil {
			return true, err
		}
		switch t {
		case FrameBye:
			s.logf("session %x ended", sess.id)
			return true, nil
		case FrameStart:
			if s.cfg.Verify && !m.Verify {
				WriteFrame(c, FrameError, &Message{Error: "this server verifies every byte: run the client with -verify"})
				return true, errors.New("client does not verify")
			}
			if err := s.measure(sess, c, r, m); err != nil {
				return true, err
			}
		case FrameError:
			return true, fmt.Errorf("client gave up: %s", m.Error)
		default:
			return true, protoErr("unexpected %v between measurements", t)
		}
	}
}

// connResult is what one data connection's handler saw.
type connResult struct {
	received, verified uint64
	end                time.Time
	err                error
	mismatch           *MismatchError
}

// measure runs the server's side of one measurement whose Start is m.
// It returns an error that ends the session: a control failure, or a
// mismatch.
func (s *server) measure(sess *session, c net.Conn, r io.Reader, start *Message) error {
	m := &measurement{start: *start, conns: make([]net.Conn, start.Conns), all: make(chan struct{})}
	sess.mu.Lock()
	sess.meas = m
	sess.mu.Unlock()
	var closeOnce sync.Once
	closeAll := func() {
		closeOnce.Do(func() {
			sess.mu.Lock()
			m.ended = true
			sess.mu.Unlock()
			for _, dc := range m.conns {
				if dc != nil {
					dc.Close()
				}
			}
		})
	}
	defer func() {
		closeAll()
		sess.mu.Lock()
		sess.meas = nil
		sess.mu.Unlock()
	}()
	// closeAll runs once m.ended is set, so conns cannot change under it.

	if err := WriteFrame(c, FrameReady, nil); err != nil {
		return err
	}
	t, msg, err := ReadFrame(r)
	if err != nil {
		return err
	}
	if t == FrameError {
		return fmt.Errorf("client gave up: %s", msg.Error)
	}
	if t != FrameGo {
		return protoErr("got %v, want Go", t)
	}
	timer := time.NewTimer(s.cfg.Timeout)
	defer timer.Stop()
	select {
	case <-m.all:
	case <-timer.C:
		sess.mu.Lock()
		n := m.n
		sess.mu.Unlock()
		err := fmt.Errorf("only %d of %d data connections arrived within %v", n, len(m.conns), s.cfg.Timeout)
		WriteFrame(c, FrameError, &Message{Error: err.Error()})
		return err
	case <-s.ctx.Done():
		return s.ctx.Err()
	}
	transport := "tcp"
	if tc, ok := m.conns[0].(interface{ Transport() string }); ok {
		transport = tc.Transport()
	}

	u0, s0 := proccpu.Times()
	t0 := time.Now()
	results := make([]connResult, len(m.conns))
	var wg sync.WaitGroup
	stopped := make(chan struct{}) // closed at the first mismatch
	var stopOnce sync.Once
	for i, dc := range m.conns {
		wg.Go(func() {
			res := &results[i]
			s.handle(dc, start, i, res)
			if res.mismatch != nil {
				// Stop the traffic: cut the data connections and report
				// at once, without waiting for Finish.
				stopOnce.Do(func() { closeAll(); close(stopped) })
			}
		})
	}
	handlersDone := make(chan struct{})
	go func() { wg.Wait(); close(handlersDone) }()
	if err := WriteFrame(c, FrameStarted, nil); err != nil {
		closeAll()
		<-handlersDone
		return err
	}
	type frame struct {
		t   FrameType
		m   *Message
		err error
	}
	finish := make(chan frame, 1)
	go func() {
		t, m, err := ReadFrame(r)
		finish <- frame{t, m, err}
	}()
	// checkFinish turns what came instead of Finish into an error.
	checkFinish := func(f frame) error {
		switch {
		case f.err != nil:
			return f.err
		case f.t == FrameError:
			return fmt.Errorf("client gave up: %s", f.m.Error)
		case f.t != FrameFinish:
			return protoErr("got %v, want Finish", f.t)
		}
		return nil
	}
	var failure string
	var early bool // reporting before Finish
	select {
	case f := <-finish:
		if err := checkFinish(f); err != nil {
			closeAll()
			<-handlersDone
			return err
		}
		drain := time.NewTimer(s.cfg.Timeout)
		defer drain.Stop()
		select {
		case <-handlersDone:
		case <-stopped:
			<-handlersDone
		case <-drain.C:
			failure = fmt.Sprintf("data still in flight %v after the client finished", s.cfg.Timeout)
			closeAll()
			<-handlersDone
		}
	case <-stopped:
		early = true
		<-handlersDone
	}
	u1, s1 := proccpu.Times()

	rep := &Message{ServerTransport: transport, CPUUser: (u1 - u0).Seconds(), CPUSys: (s1 - s0).Seconds()}
	end := t0
	for i := range results {
		res := &results[i]
		rep.Received += res.received
		rep.Verified += res.verified
		if res.end.After(end) {
			end = res.end
		}
		if res.mismatch != nil && (rep.Mismatch == nil || res.mismatch.Conn < rep.Mismatch.Conn) {
			rep.Mismatch = res.mismatch
		}
		if res.err != nil && failure == "" && rep.Mismatch == nil {
			failure = fmt.Sprintf("data connection %d: %v", i, res.err)
		}
	}
	rep.Seconds = end.Sub(t0).Seconds()
	if rep.Mismatch != nil {
		failure = rep.Mismatch.Error()
	}
	rep.Error = truncate(failure, MaxErrorText)
	s.logf("%s %s size=%d conns=%d transport=%s: received %d bytes in %.3fs, verified %d; cpu %.3fs user %.3fs sys%s",
		start.Mode, start.Transport, start.Size, start.Conns, transport, rep.Received, rep.Seconds, rep.Verified,
		rep.CPUUser, rep.CPUSys, map[bool]string{true: "; FAILED: " + failure, false: ""}[failure != ""])
	if err := WriteFrame(c, FrameReport, rep); err != nil {
		return err
	}
	if early {
		// The client answers the early report with its Finish.
		c.SetReadDeadline(time.Now().Add(s.cfg.Timeout))
		if err := checkFinish(<-finish); err != nil {
			return err
		}
		c.SetReadDeadline(time.Time{})
	}
	if rep.Mismatch != nil {
		return rep.Mismatch
	}
	return nil
}

// handle receives one data connection's traffic until the client closes
// its side: a stream is read and counted, ping-pong messages are echoed.
func (s *server) handle(c net.Conn, start *Message, index int, res *connResult) {
	var pat *Pattern
	if start.Verify {
		pat = NewPattern(start.Seed, index)
	}
	check := func(b []byte) bool {
		res.received += uint64(len(b))
		if pat == nil {
			return true
		}
		off, got, want, ok := pat.Check(b)
		if !ok {
			res.mismatch = &MismatchError{Conn: index, Offset: off, Got: got, Want: want}
			return false
		}
		res.verified += uint64(len(b))
		return true
	}
	if start.Mode == ModePingPong {
		buf := make([]byte, start.Size)
		for {
			if _, err := io.ReadFull(c, buf); err != nil {
				if err != io.EOF {
					res.err = err
				}
				break
			}
			if !check(buf) {
				break
			}
			if _, err := c.Write(buf); err != nil {
				res.err = err
				break
			}
		}
		res.end = time.Now()
		return
	}
	buf := make([]byte, readBufSize)
	for {
		n, err := c.Read(buf)
		if n > 0 && !check(buf[:n]) {
			break
		}
		if err != nil {
			if err != io.EOF {
				res.err = err
			}
			break
		}
	}
	res.end = time.Now()
}

// truncate shortens s to at most n bytes on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n]
}
