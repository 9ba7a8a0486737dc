package netconn

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"os"
	"sync/atomic"
)

// logger is where netconn logs; silent until SetLogger.
var logger atomic.Pointer[slog.Logger]

var discard = slog.New(slog.DiscardHandler)

// SetLogger sets the logger that receives netconn's records: fallbacks to
// TCP (Info), failed handshakes (Warn) and connection errors (Warn), each
// with the peer's address and the reason. nil, the default, discards them.
// Records carry the attributes "peer", "side" (dial or accept) and
// "reason" or "error".
func SetLogger(l *slog.Logger) {
	if l == nil {
		l = discard
	}
	logger.Store(l)
}

func currentLogger() *slog.Logger {
	if l := logger.Load(); l != nil {
		return l
	}
	return discard
}

// logFallback logs a conn that tried RDMA and is on TCP.
func logFallback(c *Conn, side, kind string) {
	// A connection that auto put on TCP because nothing is faster on its
	// path is the expected case between hosts without RDMA: Debug.
	level := slog.LevelInfo
	if kind == FallbackNoFastPath {
		level = slog.LevelDebug
	}
	l := currentLogger()
	if !l.Enabled(context.Background(), level) {
		return
	}
	l.Log(context.Background(), level, "rsock: connection fell back to TCP",
		slog.String("side", side), slog.String("peer", c.RemoteAddr().String()),
		slog.String("kind", kind), slog.String("reason", c.FallbackReason()))
}

// logHandshakeFailure logs a handshake that ended without a connection.
func logHandshakeFailure(side string, peer net.Addr, err error) {
	handshakeFailures.Add(1)
	l := currentLogger()
	if !l.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	l.Warn("rsock: handshake failed",
		slog.String("side", side), slog.String("peer", peer.String()), slog.String("error", err.Error()))
}

// noteError logs the first failure of a conn's reads or writes; the end of
// the stream, deadlines and the conn's own Close are not failures.
func (c *Conn) noteError(op string, err error) {
	if errors.Is(err, io.EOF) || errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
		return
	}
	if c.obs.errLogged.Swap(true) {
		return
	}
	connErrors.Add(1)
	l := currentLogger()
	if !l.Enabled(context.Background(), slog.LevelWarn) {
		return
	}
	l.Warn("rsock: connection error",
		slog.String("op", op), slog.String("transport", c.transport),
		slog.String("peer", c.RemoteAddr().String()), slog.String("error", err.Error()))
}
