package rsock

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/ring"
	"github.com/rsock-go/rsock/verbs"
)

// ConnectOptions name the stream for its errors.
type ConnectOptions struct {
	// Net is the network name in errors, e.g. "tcp".
	Net string
	// LocalAddr and RemoteAddr are reported in errors and by the addresses
	// of the stream.
	LocalAddr, RemoteAddr net.Addr
	// PathRTT is the least round trip measured on the path to the peer by
	// other means (the handshake's TCP connection), 0 if unknown; with
	// congestion control it bounds the least round trip the queue pair
	// samples (verbs.PathRTTHinter).
	PathRTT time.Duration
}

// Errors a stream reports (inside *net.OpError).
var (
	// ErrProtocol: the peer broke the stream protocol.
	ErrProtocol = errors.New("rsock: protocol violation by peer")
	// ErrPeerClosed: the peer closed the stream; writes fail with it.
	ErrPeerClosed = fmt.Errorf("rsock: peer closed the stream: %w", syscall.EPIPE)
)

// Stream is a connected byte stream. Its methods are safe for concurrent
// use, as those of net.Conn.
type Stream struct {
	e    *Endpoint
	opts ConnectOptions

	peerRingAddr uint64
	peerRingRKey uint32
	maxMsg       int

	rmu sync.Mutex // serialises readers
	wmu sync.Mutex // serialises writers

	mu         sync.Mutex
	prod       *ring.Producer
	cons       *ring.Consumer
	sendHead   uint64 // send ring cursor: bytes copied in
	sendFreed  uint64 // bytes whose write completed
	ctrlNext   int    // next control send slot
	ctrlInUse  int    // control sends not yet completed
	lastSend   time.Time
	posting    int        // posts in progress outside mu (data and control)
	postDone   *sync.Cond // on mu: signalled when a post outside mu ends
	rfin       bool       // the peer will send no more data
	peerClosed bool       // the peer closed
	wclosed    bool       // CloseWrite was called
	closeSent  bool       // CLOSE was posted: it is the last message
	closed     bool       // Close was called
	err        error      // the stream failed
	// sendErr is a failed completion of one of our own sends, held until
	// the completions polled with it are handled: when they hold the
	// peer's CLOSE, the peer left in order and its data stays readable up
	// to io.EOF (a provider that fails a send to a closed peer at once,
	// as shm does, would otherwise lose it).
	sendErr    error
	sendWRs    [2]verbs.SendWR
	sendSGEs   [2][2]verbs.SGE
	ctrlWRs    [maxCtrlSends][1]verbs.SendWR // by send slot: posted outside mu
	ctrlSGEs   [maxCtrlSends][1]verbs.SGE
	readReady  chan struct{}
	writeReady chan struct{}
	rdl, wdl   *deadline
	wcs        []verbs.WC // completions being handled by drive
	keepalive  *time.Timer
	stalls     stalls // writers' waits, for Stats
	// kw is the completion queue's own wait (verbs.KickWaiter), when it
	// has one: Read and Write then sleep on it themselves, with no
	// goroutine handing completions over. iw writes straight from the
	// caller's buffer into the peer's ring (verbs.InlineWriter), when the
	// provider can: one copy per byte on Write, none into a send ring.
	kw          verbs.KickWaiter
	iw          verbs.InlineWriter
	closeOnce   sync.Once
	teardownErr error
}

// Connect moves the endpoint's queue pair to RTS aimed at the peer and
// starts the stream. On error the endpoint is left to Close.
func (e *Endpoint) Connect(peer Params, opts ConnectOptions) (*Stream, error) {
	if e.used {
		return nil, fmt.Errorf("rsock: endpoint already used: %w", net.ErrClosed)
	}
	if err := peer.Validate(); err != nil {
		return nil, err
	}
	mtu := verbs.MTUFromBytes(min(peer.MTU, e.params.MTU))
	payload := mtu.Bytes() // per packet
	if pm := min(peer.PacketMTU, e.params.PacketMTU); pm > payload {
		// Both sides carry more per packet than the path MTU names.
		if err := e.qp.(verbs.PacketMTUSetter).SetPacketMTU(pm); err != nil {
			return nil, err
		}
		payload = pm
	}
	depth := min(peer.RecvDepth, e.cfg.RecvDepth) // our send queue is sized for our depth
	r := recoveryFor(e.params, peer)
	if err := e.setRecovery(r, peer.RingSize, payload, depth); err != nil {
		return nil, err
	}
	if h, ok := e.qp.(verbs.PathRTTHinter); ok && r.congestion && opts.PathRTT > 0 {
		if err := h.SetPathRTT(opts.PathRTT); err != nil {
			return nil, err
		}
	}
	err := verbs.ConnectRC(e.qp, verbs.RCPeer{
		AH:              verbs.AH{DGID: peer.GID, DPort: peer.UDPPort, HopLimit: 64},
		PathMTU:         mtu,
		DestQPN:         peer.QPN,
		RQPSN:           peer.PSN,
		SQPSN:           e.params.PSN,
		MaxDestRdAtomic: 1,
		MaxRdAtomic:     1,
		MinRNRTimer:     12, // 0.64 ms
		Timeout:         e.cfg.AckTimeout,
		RetryCnt:        e.cfg.RetryCount,
		RNRRetry:        7,
	})
	if err != nil {
		return nil, err
	}
	e.used = true
	s := &Stream{
		e:            e,
		opts:         opts,
		peerRingAddr: peer.RingAddr,
		peerRingRKey: peer.RingRKey,
		maxMsg:       min(max(peer.RingSize/4, min(peer.RingSize, 64<<10)), 1<<20, maxMessage),
		prod:         ring.NewProducer(peer.RingSize, depth, controlReserve),
		cons:         ring.NewConsumer(e.cfg.RingSize, e.cfg.RecvDepth),
		readReady:    make(chan struct{}, 1),
		writeReady:   make(chan struct{}, 1),
		rdl:          newDeadline(),
		wdl:          newDeadline(),
		wcs:          make([]verbs.WC, 32),
		lastSend:     time.Now(),
	}
	s.postDone = sync.NewCond(&s.mu)
	s.kw, _ = e.cq.(verbs.KickWaiter)
	s.iw, _ = e.qp.(verbs.InlineWriter)
	if s.opts.Net == "" {
		s.opts.Net = "rdma"
	}
	if e.cfg.KeepAlive > 0 {
		s.keepalive = time.AfterFunc(e.cfg.KeepAlive, s.onKeepAlive)
	}
	return s, nil
}

// LocalAddr returns ConnectOptions.LocalAddr.
func (s *Stream) LocalAddr() net.Addr { return s.opts.LocalAddr }

// RemoteAddr returns ConnectOptions.RemoteAddr.
func (s *Stream) RemoteAddr() net.Addr { return s.opts.RemoteAddr }

func (s *Stream) opError(op string, err error) error {
	return &net.OpError{Op: op, Net: s.opts.Net, Source: s.opts.LocalAddr, Addr: s.opts.RemoteAddr, Err: err}
}

// signal leaves a token in c; false if one was there already.
func signal(c chan struct{}) bool {
	select {
	case c <- struct{}{}:
		return true
	default:
		return false
	}
}

// signalRead and signalWrite wake a reader or writer: through its
// channel, and through the completion queue's kick when it sleeps there.
func (s *Stream) signalRead() {
	if signal(s.readReady) && s.kw != nil {
		s.kw.Kick()
	}
}

func (s *Stream) signalWrite() {
	if signal(s.writeReady) && s.kw != nil {
		s.kw.Kick()
	}
}

// kicks is the completion queue's kick count (0 without KickWaiter);
// read it before looking at what a wait is for.
func (s *Stream) kicks() uint64 {
	if s.kw == nil {
		return 0
	}
	return s.kw.Kicks()
}

// await waits, with s.mu released, until the completion queue may hold
// completions, ready holds a token, or the deadline passes
// (os.ErrDeadlineExceeded): expired closes then, and when is its time.
// With a KickWaiter the calling goroutine sleeps on the queue itself;
// seen is the kick count read before the caller looked at its state.
func (s *Stream) await(ready chan struct{}, expired <-chan struct{}, when time.Time, seen uint64) error {
	if s.kw == nil {
		select {
		case <-s.e.cq.Notify():
		case <-ready:
		case <-expired:
			return os.ErrDeadlineExceeded
		}
		return nil
	}
	select {
	case <-ready:
		return nil
	case <-expired:
		return os.ErrDeadlineExceeded
	default:
	}
	if err := s.kw.WaitKick(seen, when); errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	return nil // the caller's loop looks at the state again
}

// fail records the first error and wakes everyone. The caller holds s.mu.
func (s *Stream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	s.signalRead()
	s.signalWrite()
}

// Abort fails the stream with err: pending and later reads and writes
// return it. The caller uses it when the control connection dies.
func (s *Stream) Abort(err error) {
	s.mu.Lock()
	s.fail(err)
	s.mu.Unlock()
}

// AbortUnlessPeerClosed fails the stream with err unless the peer already
// closed it in order (its CLOSE arrived), in which case its data stays
// readable up to io.EOF. The caller uses it when the control connection
// ends, which happens both on an orderly close and when the peer dies.
func (s *Stream) AbortUnlessPeerClosed(err error) {
	s.mu.Lock()
	if !s.closed {
		s.drive() // a CLOSE may wait in the completion queue
	}
	if !s.peerClosed {
		s.fail(err)
	}
	s.mu.Unlock()
}

// Read reads data written by the peer; io.EOF follows the last byte after
// the peer's CloseWrite or Close.
func (s *Stream) Read(b []byte) (int, error) {
	s.rmu.Lock()
	defer s.rmu.Unlock()
	s.mu.Lock()
	for {
		seen := s.kicks()
		if s.closed {
			s.mu.Unlock()
			return 0, s.opError("read", net.ErrClosed)
		}
		s.drive()
		if s.cons.Readable() > 0 {
			break
		}
		if s.rfin {
			s.mu.Unlock()
			return 0, io.EOF
		}
		if s.err != nil {
			err := s.err
			s.mu.Unlock()
			return 0, s.opError("read", err)
		}
		if len(b) == 0 {
			s.mu.Unlock()
			return 0, nil
		}
		s.mu.Unlock()
		if err := s.await(s.readReady, s.rdl.wait(), s.rdl.when(), seen); err != nil {
			return 0, s.opError("read", err)
		}
		s.mu.Lock()
	}
	select {
	case <-s.rdl.wait():
		s.mu.Unlock()
		return 0, s.opError("read", os.ErrDeadlineExceeded)
	default:
	}
	n := min(len(b), s.cons.Readable())
	// The region stays put until Consume: the peer writes only into
	// space already credited back.
	s.e.recv.Read(s.cons.ReadCursor(), b[:n])
	s.cons.Consume(n)
	if s.cons.ShouldReport() {
		s.sendControl(ctrlCredit)
	}
	s.mu.Unlock()
	return n, nil
}

// Write writes b, blocking while the peer's ring or receive queue is full.
func (s *Stream) Write(b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	written := 0
	for len(b) > 0 || written == 0 {
		s.mu.Lock()
		n, err := s.waitWritable(len(b))
		if err != nil {
			s.mu.Unlock()
			return written, s.opError("write", err)
		}
		if n == 0 { // a zero-length write
			s.mu.Unlock()
			return 0, nil
		}
		if s.iw != nil {
			err = s.postDirect(b[:n])
			s.mu.Unlock()
			if err != nil {
				return written, s.opError("write", err)
			}
			written += n
			b = b[n:]
			continue
		}
		head := s.sendHead
		s.mu.Unlock()
		// The send ring region [head, head+n) is free and only this writer
		// (holding wmu) touches it.
		s.e.send.Write(head, b[:n])
		s.mu.Lock()
		switch {
		case s.closed:
			err = net.ErrClosed
		case s.err != nil:
			err = s.err
		default:
			err = s.postData(head, n)
		}
		s.mu.Unlock()
		if err != nil {
			return written, s.opError("write", err)
		}
		written += n
		b = b[n:]
	}
	return written, nil
}

// waitWritable waits until up to want bytes may be written and returns how
// many. The caller holds s.mu; it is released while waiting.
func (s *Stream) waitWritable(want int) (int, error) {
	for {
		seen := s.kicks()
		s.drive() // first: a CLOSE or an error may be waiting in the queue
		switch {
		case s.closed:
			return 0, net.ErrClosed
		case s.err != nil:
			return 0, s.err
		case s.wclosed:
			return 0, syscall.EPIPE
		case s.peerClosed:
			return 0, ErrPeerClosed
		}
		select {
		case <-s.wdl.wait():
			return 0, os.ErrDeadlineExceeded
		default:
		}
		if want == 0 {
			return 0, nil
		}
		sendFree := s.e.send.Size() - int(s.sendHead-s.sendFreed)
		n := min(want, s.prod.FreeBytes(), sendFree, s.maxMsg)
		if n > 0 && s.prod.CanSendData() {
			return n, nil
		}
		s.noteStall(sendFree)
		s.mu.Unlock()
		s.await(s.writeReady, s.wdl.wait(), s.wdl.when(), seen) // the loop looks at the deadline
		s.mu.Lock()
	}
}

// postData writes n bytes from the send ring at head into the peer's ring,
// as one WRITE_WITH_IMM, or a WRITE and a WRITE_WITH_IMM when the peer's
// ring wraps. The caller holds s.mu and wmu. The space is claimed under
// s.mu, which is released while the requests are posted, so that Read can
// consume and return credits meanwhile; wmu keeps other writers and
// CloseWrite (whose FIN must follow the data) out.
func (s *Stream) postData(head uint64, n int) error {
	r1, r2 := ring.Spans(s.prod.Written(), n, s.prod.Size())
	wrs := s.sendWRs[:0]
	off := 0
	for i, r := range [2]ring.Span{r1, r2} {
		if r.Len == 0 {
			continue
		}
		sgl := s.localSGL(&s.sendSGEs[i], head+uint64(off), r.Len)
		wr := verbs.SendWR{Opcode: verbs.WRRDMAWrite, SGL: sgl,
			RemoteAddr: s.peerRingAddr + uint64(r.Off), RKey: s.peerRingRKey}
		off += r.Len
		if off == n {
			// The last write carries the immediate and its completion
			// frees the whole message in the send ring.
			wr.Opcode = verbs.WRRDMAWriteWithImm
			wr.Imm = dataImm(n)
			wr.Flags = verbs.SendSignaled
			wr.ID = head + uint64(n)
		}
		wrs = append(wrs, wr)
	}
	s.prod.Wrote(n)
	s.sendHead = head + uint64(n)
	s.lastSend = time.Now()
	return s.post(wrs)
}

// post posts wrs, whose resources the caller claimed, with s.mu released:
// posting transmits (a system call), and readers and writers must not
// wait for it. Close waits for posts in progress before it sends CLOSE
// and before it frees the rings. The caller holds s.mu; a failure fails
// the stream.
func (s *Stream) post(wrs []verbs.SendWR) error {
	s.posting++
	s.mu.Unlock()
	_, err := s.e.qp.PostSend(wrs)
	s.mu.Lock()
	s.posting--
	s.postDone.Broadcast()
	s.signalWrite() // Close may wait for the post to end
	if err != nil {
		s.fail(err)
	}
	return err
}

// postDirect writes data from the caller's buffer straight into the
// peer's ring at the producer cursor (verbs.InlineWriter): a WRITE and a
// WRITE_WITH_IMM when the ring wraps, else one WRITE_WITH_IMM, both
// unsignaled, as no send ring waits to be freed. The caller holds s.mu
// and wmu; s.mu is released during the copy, as in post.
func (s *Stream) postDirect(data []byte) error {
	n := len(data)
	r1, r2 := ring.Spans(s.prod.Written(), n, s.prod.Size())
	s.prod.Wrote(n)
	s.lastSend = time.Now()
	s.posting++
	s.mu.Unlock()
	var err error
	off := 0
	for i, r := range [2]ring.Span{r1, r2} {
		if r.Len == 0 || err != nil {
			continue
		}
		wr := &s.sendWRs[i]
		*wr = verbs.SendWR{Opcode: verbs.WRRDMAWrite, RemoteAddr: s.peerRingAddr + uint64(r.Off), RKey: s.peerRingRKey}
		if off+r.Len == n {
			wr.Opcode, wr.Imm = verbs.WRRDMAWriteWithImm, dataImm(n)
		}
		err = s.iw.PostWriteInline(wr, data[off:off+r.Len])
		off += r.Len
	}
	s.mu.Lock()
	s.posting--
	s.postDone.Broadcast()
	s.signalWrite()
	if err != nil {
		s.fail(err)
	}
	return err
}

// localSGL describes n bytes of the send ring at cursor c.
func (s *Stream) localSGL(dst *[2]verbs.SGE, c uint64, n int) []verbs.SGE {
	a, b := ring.Spans(c, n, s.e.send.Size())
	base, key := s.e.sendMR.Addr(), s.e.sendMR.LKey()
	dst[0] = verbs.SGE{Addr: base + uint64(a.Off), Length: uint32(a.Len), LKey: key}
	if b.Len == 0 {
		return dst[:1]
	}
	dst[1] = verbs.SGE{Addr: base + uint64(b.Off), Length: uint32(b.Len), LKey: key}
	return dst[:2]
}

// sendControl sends a control message carrying the current credits, if
// the peer has a receive request and a control slot is free; credits not
// sent now go with the next one. The caller holds s.mu, which is released
// while the message is posted: its slot and credits are claimed first, and
// reports that reach the peer out of order are harmless (it keeps the
// largest).
func (s *Stream) sendControl(typ byte) bool {
	if s.err != nil || s.closed || s.ctrlInUse == maxCtrlSends || !s.prod.CanSendControl() {
		return false
	}
	if s.peerClosed || s.closeSent {
		// The peer is tearing its queue pair down, or will as soon as
		// our CLOSE arrives: a message now would only be retried against
		// nothing, and Close would wait for its acknowledgement in vain.
		return false
	}
	k := s.ctrlNext
	slot := s.e.cfg.RecvDepth + k
	consumed, processed := s.cons.Report()
	putControl(s.e.ctrlSlot(slot), typ, consumed, processed)
	s.ctrlSGEs[k][0] = s.e.ctrlSGE(slot)
	s.ctrlWRs[k][0] = verbs.SendWR{ID: ctrlWRID | uint64(slot), Opcode: verbs.WRSend, Flags: verbs.SendSignaled, SGL: s.ctrlSGEs[k][:]}
	s.prod.SentControl()
	s.ctrlInUse++
	s.ctrlNext = (s.ctrlNext + 1) % maxCtrlSends
	s.lastSend = time.Now()
	s.closeSent = typ == ctrlClose
	return s.post(s.ctrlWRs[k][:]) == nil
}

// ctrlWRID marks the work request IDs of control sends; data writes use
// the send ring cursor, which stays below it.
const ctrlWRID = 1 << 63

// SetDeadline sets the read and write deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	s.rdl.set(t)
	s.wdl.set(t)
	s.kick()
	return nil
}

// kick wakes waiters sleeping on the completion queue, so that they look
// at a deadline that moved.
func (s *Stream) kick() {
	if s.kw != nil {
		s.kw.Kick()
	}
}

// SetReadDeadline sets the read deadline; a Read waiting past it returns
// os.ErrDeadlineExceeded.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.rdl.set(t)
	s.kick()
	return nil
}

// SetWriteDeadline sets the write deadline.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.wdl.set(t)
	s.kick()
	return nil
}
