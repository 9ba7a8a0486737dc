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

	mu          sync.Mutex
	prod        *ring.Producer
	cons        *ring.Consumer
	sendHead    uint64 // send ring cursor: bytes copied in
	sendFreed   uint64 // bytes whose write completed
	ctrlNext    int    // next control send slot
	ctrlInUse   int    // control sends not yet completed
	lastSend    time.Time
	posting     int        // posts in progress outside mu (data and control)
	postDone    *sync.Cond // on mu: signalled when a post outside mu ends
	rfin        bool       // the peer will send no more data
	peerClosed  bool       // the peer closed
	wclosed     bool       // CloseWrite was called
	closed      bool       // Close was called
	err         error      // the stream failed
	sendWRs     [2]verbs.SendWR
	sendSGEs    [2][2]verbs.SGE
	ctrlWRs     [maxCtrlSends][1]verbs.SendWR // by send slot: posted outside mu
	ctrlSGEs    [maxCtrlSends][1]verbs.SGE
	readReady   chan struct{}
	writeReady  chan struct{}
	rdl, wdl    *deadline
	wcs         []verbs.WC // completions being handled by drive
	keepalive   *time.Timer
	stalls      stalls // writers' waits, for Stats
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
	if peer.SelectiveRepeat && e.params.SelectiveRepeat {
		if err := e.qp.(verbs.SelectiveRepeater).SetSelectiveRepeat(true); err != nil {
			return nil, err
		}
		if peer.CongestionControl && e.params.CongestionControl {
			if err := e.qp.(verbs.CongestionController).SetCongestionControl(true); err != nil {
				return nil, err
			}
		}
	}
	err := e.qp.Modify(&verbs.QPAttr{
		State:           verbs.QPSRTR,
		AH:              verbs.AH{DGID: peer.GID, DPort: peer.UDPPort, HopLimit: 64},
		PathMTU:         mtu,
		DestQPN:         peer.QPN,
		RQPSN:           peer.PSN,
		MaxDestRdAtomic: 1,
		MinRNRTimer:     12, // 0.64 ms
	}, verbs.AttrState|verbs.AttrAV|verbs.AttrPathMTU|verbs.AttrDestQPN|verbs.AttrRQPSN|verbs.AttrMaxDestRdAtomic|verbs.AttrMinRNRTimer)
	if err != nil {
		return nil, err
	}
	err = e.qp.Modify(&verbs.QPAttr{
		State:       verbs.QPSRTS,
		SQPSN:       e.params.PSN,
		Timeout:     e.cfg.AckTimeout,
		RetryCnt:    e.cfg.RetryCount,
		RNRRetry:    7,
		MaxRdAtomic: 1,
	}, verbs.AttrState|verbs.AttrSQPSN|verbs.AttrTimeout|verbs.AttrRetryCnt|verbs.AttrRNRRetry|verbs.AttrMaxQPRdAtomic)
	if err != nil {
		return nil, err
	}
	e.used = true
	depth := min(peer.RecvDepth, e.cfg.RecvDepth) // our send queue is sized for our depth
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

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fail records the first error and wakes everyone. The caller holds s.mu.
func (s *Stream) fail(err error) {
	if s.err == nil {
		s.err = err
	}
	signal(s.readReady)
	signal(s.writeReady)
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
		select {
		case <-s.e.cq.Notify():
		case <-s.readReady:
		case <-s.rdl.wait():
			return 0, s.opError("read", os.ErrDeadlineExceeded)
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
		select {
		case <-s.e.cq.Notify():
		case <-s.writeReady:
		case <-s.wdl.wait():
		}
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
	signal(s.writeReady) // Close may wait for the post to end
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
	if s.peerClosed {
		// The peer is tearing its queue pair down: a message now would
		// only be retried against nothing.
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
	return s.post(s.ctrlWRs[k][:]) == nil
}

// ctrlWRID marks the work request IDs of control sends; data writes use
// the send ring cursor, which stays below it.
const ctrlWRID = 1 << 63

// SetDeadline sets the read and write deadlines.
func (s *Stream) SetDeadline(t time.Time) error {
	s.rdl.set(t)
	s.wdl.set(t)
	return nil
}

// SetReadDeadline sets the read deadline; a Read waiting past it returns
// os.ErrDeadlineExceeded.
func (s *Stream) SetReadDeadline(t time.Time) error {
	s.rdl.set(t)
	return nil
}

// SetWriteDeadline sets the write deadline.
func (s *Stream) SetWriteDeadline(t time.Time) error {
	s.wdl.set(t)
	return nil
}
