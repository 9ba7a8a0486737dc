//go:build linux

package memif

import (
	"crypto/subtle"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link/internal/eventfd"
)

// maxRegions is how many regions a server accepts from one client.
const maxRegions = 16

// Listener is a memif server socket. Each Accept serves one client.
type Listener struct {
	ln     *net.UnixListener
	path   string
	secret string
	cfg    Config
}

// Listen creates a memif server socket at path. The directory holding it
// must be accessible to its owner only (mode 0700 or stricter), since the
// socket is the way into the shared memory; the socket itself is made
// 0600. The socket file is removed by Close. Connected links do not need
// it: a server expecting one client can Close the listener right after
// Accept, so that no socket file outlives the process even if it is
// killed later. A path starting with '@' names an abstract socket (no
// file; DPDK's default).
func Listen(path, secret string, cfg Config) (*Listener, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	abstract := strings.HasPrefix(path, "@")
	if !abstract {
		dir := filepath.Dir(path)
		st, err := os.Stat(dir)
		if err != nil {
			return nil, fmt.Errorf("memif: socket directory: %w", err)
		}
		if !st.IsDir() || st.Mode().Perm()&0o077 != 0 {
			return nil, fmt.Errorf("memif: socket directory %s has mode %v, want 0700", dir, st.Mode())
		}
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("memif: listening on %s: %w", path, err)
	}
	if abstract {
		return &Listener{ln: ln, path: path, secret: secret, cfg: c}, nil
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("memif: socket permissions: %w", err)
	}
	return &Listener{ln: ln, path: path, secret: secret, cfg: c}, nil
}

// Path returns the socket's path.
func (ln *Listener) Path() string { return ln.path }

// Close stops listening and removes the socket file. Links already
// accepted stay up.
func (ln *Listener) Close() error { return ln.ln.Close() }

// Accept waits for a client and runs the server side of the handshake:
// it sends HELLO, checks INIT (interface id, Ethernet mode, secret), maps
// the offered region after checking it, checks the rings, and answers
// CONNECTED. A client that fails the handshake is sent DISCONNECT with the
// reason, and Accept returns the error; the listener stays usable. The
// server receives on the C2S ring and sends on S2C.
func (ln *Listener) Accept() (*Link, error) {
	conn, err := ln.ln.AcceptUnix()
	if err != nil {
		return nil, fmt.Errorf("memif: accept: %w", err)
	}
	if err := ln.checkPeer(conn); err != nil {
		return nil, err
	}
	return ln.serve(conn)
}

// checkPeer vets a client with Config.CheckPeer, and closes it if it
// fails.
func (ln *Listener) checkPeer(conn *net.UnixConn) error {
	if ln.cfg.CheckPeer == nil {
		return nil
	}
	if err := ln.cfg.CheckPeer(conn); err != nil {
		conn.Close()
		return fmt.Errorf("memif: client refused: %w", err)
	}
	return nil
}

// serve runs the server side of the handshake on an accepted client.
func (ln *Listener) serve(conn *net.UnixConn) (*Link, error) {
	ctrl := &control{c: conn}
	l, err := serverHandshake(ctrl, ln.secret, ln.cfg, time.Now().Add(ln.cfg.HandshakeTimeout))
	if err != nil {
		var de *DisconnectError
		if !errors.As(err, &de) {
			ctrl.disconnect(err.Error())
		}
		conn.Close()
		return nil, err
	}
	return l, nil
}

// serverRing is a ring the client added.
type serverRing struct {
	ring Ring
	evt  *eventfd.FD
}

// serverState is what the client has offered so far.
type serverState struct {
	regs  []region
	rings [2]*serverRing // indexed by C2S (0) and S2C (1)
}

func (s *serverState) release() {
	for _, r := range s.rings {
		if r != nil {
			r.evt.Close()
		}
	}
	for i := range s.regs {
		s.regs[i].close()
	}
}

func serverHandshake(ctrl *control, secret string, cfg Config, deadline time.Time) (*Link, error) {
	err := ctrl.sendMsg(MsgHello, -1, func(m Msg) {
		m.Hello().Encode(&HelloFields{Name: cfg.Name, MinVersion: Version, MaxVersion: Version,
			MaxRegion: maxRegions - 1, MaxLog2RingSize: MaxLog2RingSize})
	})
	if err != nil {
		return nil, err
	}
	m, fd, err := ctrl.expect(deadline, MsgInit)
	if err != nil {
		return nil, fmt.Errorf("memif: waiting for INIT: %w", err)
	}
	if fd >= 0 {
		unix.Close(fd)
	}
	in := m.Init()
	switch {
	case in.Version() != Version:
		return nil, fmt.Errorf("%w: client speaks version %#x, not %#x", ErrProtocol, in.Version(), Version)
	case in.ID() != cfg.ID:
		return nil, fmt.Errorf("%w: interface id %d not found", ErrProtocol, in.ID())
	case in.Mode() != ModeEthernet:
		return nil, fmt.Errorf("%w: interface mode %d, only Ethernet is supported", ErrProtocol, in.Mode())
	case !secretMatches(secret, in.SecretBytes()):
		return nil, fmt.Errorf("%w: incorrect secret", ErrProtocol)
	}
	if err := ctrl.sendMsg(MsgAck, -1, nil); err != nil {
		return nil, err
	}
	s := &serverState{}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	for {
		m, fd, err := ctrl.recv(deadline)
		if err != nil {
			return nil, fmt.Errorf("memif: handshake: %w", err)
		}
		switch m.Type() {
		case MsgAddRegion:
			err = s.addRegion(m.AddRegion(), fd)
		case MsgAddRing:
			err = s.addRing(m.AddRing(), fd)
		case MsgConnect:
			if fd >= 0 {
				unix.Close(fd)
			}
			return s.connect(ctrl, cfg, m.Connect().IfName(), &ok)
		default:
			if fd >= 0 {
				unix.Close(fd)
			}
			err = fmt.Errorf("%w: unexpected %v during handshake", ErrProtocol, m.Type())
		}
		if err != nil {
			return nil, err
		}
		if err := ctrl.sendMsg(MsgAck, -1, nil); err != nil {
			return nil, err
		}
	}
}

// secretMatches compares the configured secret with the INIT field as
// DPDK does (no secret configured: anything goes), in constant time.
func secretMatches(secret string, field []byte) bool {
	if secret == "" {
		return true
	}
	var want [SecretLen]byte
	copy(want[:], secret)
	return subtle.ConstantTimeCompare(want[:], field[:SecretLen]) == 1
}

func (s *serverState) addRegion(a AddRegion, fd int) error {
	if fd < 0 {
		return fmt.Errorf("%w: ADD_REGION without a file descriptor", ErrProtocol)
	}
	if int(a.Index()) != len(s.regs) || len(s.regs) >= maxRegions {
		unix.Close(fd)
		return fmt.Errorf("%w: region index %d, expected %d (at most %d regions)", ErrProtocol, a.Index(), len(s.regs), maxRegions)
	}
	r, err := mapRegion(fd, a.Size())
	if err != nil {
		return err
	}
	s.regs = append(s.regs, r)
	return nil
}

func (s *serverState) addRing(a AddRing, fd int) error {
	if fd < 0 {
		return fmt.Errorf("%w: ADD_RING without an interrupt file descriptor", ErrProtocol)
	}
	f := a.Fields()
	dir := 1
	if f.Flags&AddRingC2S != 0 {
		dir = 0
	}
	var err error
	switch {
	case f.Index != 0:
		err = fmt.Errorf("%w: ring index %d, only one ring per direction", ErrProtocol, f.Index)
	case s.rings[dir] != nil:
		err = fmt.Errorf("%w: ring added twice", ErrProtocol)
	case f.Log2Size > MaxLog2RingSize:
		err = fmt.Errorf("%w: ring size 2^%d above 2^%d", ErrProtocol, f.Log2Size, MaxLog2RingSize)
	case f.PrivateHdrSize != 0:
		err = fmt.Errorf("%w: private header size %d", ErrProtocol, f.PrivateHdrSize)
	case int(f.Region) >= len(s.regs):
		err = fmt.Errorf("%w: ring in region %d of %d", ErrProtocol, f.Region, len(s.regs))
	case f.Offset%8 != 0 || uint64(f.Offset)+uint64(RingLen(f.Log2Size)) > uint64(len(s.regs[f.Region].mem)):
		err = fmt.Errorf("%w: ring at offset %d does not fit its region", ErrProtocol, f.Offset)
	}
	if err != nil {
		unix.Close(fd)
		return err
	}
	evt, err := eventfd.Open(fd)
	if err != nil {
		return err
	}
	mem := s.regs[f.Region].mem
	s.rings[dir] = &serverRing{ring: Ring(mem[f.Offset : int(f.Offset)+RingLen(f.Log2Size)]), evt: evt}
	return nil
}

// connect checks that both rings are there and initialized, resets their
// indexes, answers CONNECTED and returns the link.
func (s *serverState) connect(ctrl *control, cfg Config, peer string, ok *bool) (*Link, error) {
	for i, r := range s.rings {
		if r == nil {
			return nil, fmt.Errorf("%w: CONNECT without a %s ring", ErrProtocol, [2]string{"C2S", "S2C"}[i])
		}
		if c := r.ring.Cookie(); c != Cookie {
			return nil, fmt.Errorf("%w: ring cookie %#x, want %#x", ErrRing, c, Cookie)
		}
		r.ring.StoreHead(0)
		r.ring.StoreTail(0)
	}
	if err := ctrl.sendMsg(MsgConnected, -1, func(m Msg) { m.Connect().Encode(cfg.Name) }); err != nil {
		return nil, err
	}
	*ok = true
	rx, tx := s.rings[0], s.rings[1]
	l := &Link{cfg: cfg, peer: peer, ctrl: ctrl, regs: s.regs, done: make(chan struct{}), txEvt: tx.evt, rxEvt: rx.evt}
	l.rx = rxQueue{ring: rx.ring, regs: l.regs, size: uint16(1) << ringLog2(rx.ring)}
	l.tx = txQueue{ring: tx.ring, regs: l.regs, size: uint16(1) << ringLog2(tx.ring)}
	l.rx.arm(false)
	ctrl.c.SetDeadline(time.Time{})
	go l.watch()
	return l, nil
}

// ringLog2 recovers log2 of a ring's size from its view's length.
func ringLog2(r Ring) uint8 {
	n := (len(r) - RingHeaderLen) / DescLen
	var l uint8
	for 1<<l < n {
		l++
	}
	return l
}
