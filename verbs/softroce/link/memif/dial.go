//go:build linux

package memif

import (
	"fmt"
	"net"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rsock-go/rsock/verbs/softroce/link/internal/eventfd"
)

// Dial connects to the memif server listening on the Unix socket at path,
// as a memif client: it creates the shared region and both rings, offers
// them with the secret, and returns the link once the server answered
// CONNECTED. The client sends on the C2S ring and receives on S2C.
func Dial(path, secret string, cfg Config) (*Link, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	if err := checkSecret(secret); err != nil {
		return nil, err
	}
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("memif: connecting to %s: %w", path, err)
	}
	if c.CheckPeer != nil {
		if err := c.CheckPeer(conn); err != nil {
			conn.Close()
			return nil, fmt.Errorf("memif: server of %s: %w", path, err)
		}
	}
	ctrl := &control{c: conn}
	l, err := clientHandshake(ctrl, secret, c, time.Now().Add(c.HandshakeTimeout))
	if err != nil {
		if _, ok := err.(*DisconnectError); !ok {
			ctrl.disconnect(err.Error())
		}
		conn.Close()
		return nil, err
	}
	return l, nil
}

// clientSetup is what a client creates before offering it.
type clientSetup struct {
	reg      region
	log2     uint8
	c2s, s2c int // ring offsets in the region
	evC2S    int // eventfds, -1 once handed over
	evS2C    int
	bufC2S   uint32
	bufS2C   uint32
	bufSize  uint32
}

func (s *clientSetup) release() {
	if s.evC2S >= 0 {
		unix.Close(s.evC2S)
	}
	if s.evS2C >= 0 {
		unix.Close(s.evS2C)
	}
	s.reg.close()
}

// newClientSetup lays out region 0 as DPDK does: the C2S ring, the S2C
// ring, then the C2S ring's buffers and the S2C ring's.
func newClientSetup(log2 uint8, bufSize int) (*clientSetup, error) {
	size := 1 << log2
	rl := RingLen(log2)
	total := 2*rl + 2*size*bufSize
	if total > maxRegionSize {
		return nil, fmt.Errorf("memif: region of %d bytes is too large", total)
	}
	s := &clientSetup{log2: log2, c2s: 0, s2c: rl, evC2S: -1, evS2C: -1,
		bufC2S: uint32(2 * rl), bufS2C: uint32(2*rl + size*bufSize), bufSize: uint32(bufSize)}
	var err error
	if s.reg, err = createRegion("memif_region_0", total); err != nil {
		return nil, err
	}
	if s.evC2S, err = eventfd.New(); err != nil {
		s.release()
		return nil, err
	}
	if s.evS2C, err = eventfd.New(); err != nil {
		s.release()
		return nil, err
	}
	for i, off := range []int{s.c2s, s.s2c} {
		r := Ring(s.reg.mem[off : off+rl])
		r.Init()
		base := s.bufC2S
		if i == 1 {
			base = s.bufS2C
		}
		for j := range size {
			r.Desc(j).Encode(0, 0, uint32(bufSize), base+uint32(j)*uint32(bufSize), 0)
		}
	}
	return s, nil
}

func clientHandshake(ctrl *control, secret string, cfg Config, deadline time.Time) (*Link, error) {
	m, _, err := ctrl.expect(deadline, MsgHello)
	if err != nil {
		return nil, fmt.Errorf("memif: waiting for HELLO: %w", err)
	}
	h := m.Hello()
	if h.MinVersion() > Version || h.MaxVersion() < Version {
		return nil, fmt.Errorf("%w: server speaks versions %#x-%#x, not %#x", ErrProtocol, h.MinVersion(), h.MaxVersion(), Version)
	}
	log2 := min(cfg.Log2RingSize, h.MaxLog2RingSize())
	s, err := newClientSetup(log2, cfg.BufferSize)
	if err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			s.release()
		}
	}()
	steps := []struct {
		t    MsgType
		fd   int
		fill func(Msg)
	}{
		{MsgInit, -1, func(m Msg) {
			m.Init().Encode(&InitFields{Version: Version, ID: cfg.ID, Mode: ModeEthernet, Secret: secret, Name: cfg.Name})
		}},
		{MsgAddRegion, s.reg.fd, func(m Msg) { m.AddRegion().Encode(0, uint64(len(s.reg.mem))) }},
		{MsgAddRing, s.evC2S, func(m Msg) {
			m.AddRing().Encode(&AddRingFields{Flags: AddRingC2S, Region: 0, Offset: uint32(s.c2s), Log2Size: log2})
		}},
		{MsgAddRing, s.evS2C, func(m Msg) {
			m.AddRing().Encode(&AddRingFields{Region: 0, Offset: uint32(s.s2c), Log2Size: log2})
		}},
	}
	for _, st := range steps {
		if err := ctrl.sendMsg(st.t, st.fd, st.fill); err != nil {
			return nil, err
		}
		if _, _, err := ctrl.expect(deadline, MsgAck); err != nil {
			return nil, fmt.Errorf("memif: after %v: %w", st.t, err)
		}
	}
	if err := ctrl.sendMsg(MsgConnect, -1, func(m Msg) { m.Connect().Encode(cfg.Name) }); err != nil {
		return nil, err
	}
	m, _, err = ctrl.expect(deadline, MsgConnected)
	if err != nil {
		return nil, fmt.Errorf("memif: waiting for CONNECTED: %w", err)
	}
	peer := m.Connect().IfName()

	txEvt, err := eventfd.Open(s.evC2S)
	s.evC2S = -1
	if err != nil {
		return nil, err
	}
	rxEvt, err := eventfd.Open(s.evS2C)
	s.evS2C = -1
	if err != nil {
		txEvt.Close()
		return nil, err
	}
	ok = true
	size := uint16(1) << log2
	rl := RingLen(log2)
	l := &Link{cfg: cfg, client: true, peer: peer, ctrl: ctrl, regs: []region{s.reg}, done: make(chan struct{}),
		txEvt: txEvt, rxEvt: rxEvt}
	l.tx = txQueue{ring: Ring(s.reg.mem[s.c2s : s.c2s+rl]), regs: l.regs, size: size, client: true,
		bufSize: s.bufSize, bufBase: s.bufC2S}
	l.rx = rxQueue{ring: Ring(s.reg.mem[s.s2c : s.s2c+rl]), regs: l.regs, size: size, client: true,
		bufSize: s.bufSize, bufBase: s.bufS2C}
	// The server reset both rings' indexes on CONNECT; offer every S2C
	// buffer and start in polling mode.
	l.rx.arm(false)
	l.rx.refill()
	ctrl.c.SetDeadline(time.Time{})
	go l.watch()
	return l, nil
}
