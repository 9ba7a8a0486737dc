//go:build linux

package shm

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"sync"
)

// Listener accepts channels from peer processes on an abstract Unix
// socket of type SOCK_SEQPACKET (no file to clean up; reachable only from
// the same network namespace).
type Listener struct {
	ln   *net.UnixListener
	name string
	cfg  Config
}

// Listen listens for channels on the abstract Unix address name, or on a
// random name when name is empty. Every channel it accepts is checked
// with cfg.CheckPeer (netconn checks the process is the peer of one of
// its pending TCP handshakes).
func Listen(name string, cfg Config) (*Listener, error) {
	if name == "" {
		var b [12]byte
		rand.Read(b[:])
		name = "rsock-shm-" + hex.EncodeToString(b[:])
	}
	ln, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen: %w", err)
	}
	return &Listener{ln: ln, name: name, cfg: cfg}, nil
}

// Name returns the name to Dial.
func (l *Listener) Name() string { return l.name }

// Accept waits for a peer process to Dial and sets up the channel.
func (l *Listener) Accept() (*Device, error) {
	c, err := l.ln.AcceptUnix()
	if err != nil {
		return nil, err
	}
	return Open(c, l.cfg)
}

// Close stops listening; channels already set up stay.
func (l *Listener) Close() error { return l.ln.Close() }

// Dial sets up a channel to the process listening on the abstract Unix
// address name, checked with cfg.CheckPeer.
func Dial(name string, cfg Config) (*Device, error) {
	c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: "@" + name, Net: "unixpacket"})
	if err != nil {
		return nil, fmt.Errorf("shm: dial: %w", err)
	}
	return Open(c, cfg)
}

// channels holds the process's live channels, so that connections to a
// process that already has one share it.
var channels struct {
	sync.Mutex
	byID map[uint64]*Device
}

func register(d *Device) {
	channels.Lock()
	defer channels.Unlock()
	if channels.byID == nil {
		channels.byID = map[uint64]*Device{}
	}
	channels.byID[d.id] = d
}

func unregister(d *Device) {
	channels.Lock()
	defer channels.Unlock()
	if channels.byID[d.id] == d {
		delete(channels.byID, d.id)
	}
}

// ByID returns the live channel with the given ChannelID, or nil: the
// listener's side of a handshake in which the dialer proposes to reuse a
// channel (check that its PeerCred is the handshake's peer).
func ByID(id uint64) *Device {
	channels.Lock()
	defer channels.Unlock()
	return channels.byID[id]
}

// ToPeer returns a live channel to the process pid, or nil: the dialer's
// side, to reuse a channel instead of dialing a new one.
func ToPeer(pid int32) *Device {
	channels.Lock()
	defer channels.Unlock()
	for _, d := range channels.byID {
		if d.cred.Pid == pid {
			return d
		}
	}
	return nil
}
