package netconn

import (
	"errors"
	"strings"
	"time"

	"github.com/rsock-go/rsock/fallback"
)

// Same-host connections over verbs/shm.
//
// Two processes share one shm channel (a Unix socket, two memfd arenas,
// a watcher goroutine per side), and every connection between them is a
// queue pair on it: no socket, mapping or goroutine per connection.
//
// The first connection from a dialer to a listening address sets the
// channel up: the dialer listens on a fresh abstract Unix socket
// (rsock-shm-<24 hex digits>) and offers its name in its Hello (CapShm,
// ShmSocket); the listener dials it. Later connections to the same
// listening address offer the channel's ID instead (ShmChannel); the
// listener takes the channel only if it has one with that ID. When the
// channel is set up, each side checks its peer process (SO_PEERCRED,
// internal/peercred) against the process holding the other end of this
// TCP connection; a connection that proposes to reuse it is bound to it
// both ways with a fresh token instead (ShmToken, shmbind.go), which
// costs no look at the peer's descriptors; anyone else gets nothing. A
// listener dials only a name of that form, never a path a client names,
// and only for a peer on this host (sameHost).
//
// Once both sides confirmed, an shm connection closes its TCP control
// connection and has no goroutine of its own: the channel fails every
// stream on it when the peer process dies, and a peer that gives a
// connection up destroys its queue pair (conn.go, newRDMAConn).
//
// A channel lives while connections use it, and deviceLinger after the
// last one closed (the listener's side twice that, so that a dialer's
// offer to reuse it finds it there); a channel whose peer died is
// closed as soon as its last connection is. When shm cannot be set up,
// the connection falls back as a memif offer does (FallbackReason says
// why). shm runs on Linux; elsewhere it is never offered.

// ProviderShm is the shared-memory provider (verbs/shm): queue pairs
// between two processes of one host, where a WRITE is a memcpy.
const ProviderShm = "shm"

// LinkShm is the shm provider's link: a channel between two processes
// of one host. It falls back to TCP when it cannot be set up.
const LinkShm = "shm"

// shmSocketPrefix starts the abstract socket name of every shm offer
// (the name verbs/shm's Listen makes: 12 random bytes in hex follow).
const shmSocketPrefix = "rsock-shm-"

// validShmOffer reports whether h's shm offer is one this package makes:
// the ID of a channel, or an abstract socket rsock-shm-<24 hex digits>.
func validShmOffer(h *fallback.Hello) bool {
	if h.ShmChannel != 0 {
		return h.ShmSocket == ""
	}
	name, ok := strings.CutPrefix(h.ShmSocket, shmSocketPrefix)
	return ok && isHex(name, 24)
}

// shmOps is the registry's shm link.
type shmOps struct{}

func (shmOps) validOffer(h *fallback.Hello) bool { return validShmOffer(h) }

// errShmNoChannel is why a listener does not take an offer to reuse a
// channel it does not have (it closed, or never had it).
var errShmNoChannel = errors.New("the channel the dialer proposed to reuse is not open here")

// shmLingers returns how long an unused channel stays open on each side.
func shmLinger(listener bool) time.Duration {
	if listener {
		return 2 * deviceLinger
	}
	return deviceLinger
}
