package netlab

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/internal/streambench"
	"github.com/rsock-go/rsock/verbs"
)

// ExchangeConfig configures Exchange.
type ExchangeConfig struct {
	// Bytes is how many bytes each side sends.
	Bytes int64
	// Seed selects the pseudo-random streams: the dialer sends the
	// streambench.Pattern of (Seed, 0), the listener that of (Seed, 1).
	Seed uint64
	// Listener is true on the accepting side.
	Listener bool
	// WriteSize is the size of each write; default 64 KiB.
	WriteSize int
	// Rate caps the sending rate in bytes per second; 0: no cap.
	Rate int64
	// Stall fails the exchange when a read or a write makes no progress
	// for this long; default DefaultStall. It is a hang detector, not a
	// speed limit.
	Stall time.Duration
	// Progress, if set, is called from the reading goroutine each time
	// another ProgressEvery bytes (default 1 MiB) have been received.
	Progress      func(received int64)
	ProgressEvery int64
}

// DefaultStall is how long an exchange waits for any progress before it
// fails as stalled.
const DefaultStall = 30 * time.Second

// ExchangeResult is what one side of an exchange saw. The test compares
// the SHA-256 one side sent with the one the other side received.
type ExchangeResult struct {
	// Transport is the connection's (*netconn.Conn).Transport(), e.g.
	// "rdma/softroce/udp", or "tcp" after a fallback, with
	// FallbackReason.
	Transport      string `json:"transport"`
	FallbackReason string `json:"fallback_reason,omitempty"`

	Sent           int64  `json:"sent"`
	SentSHA256     string `json:"sent_sha256"`
	Received       int64  `json:"received"`
	ReceivedSHA256 string `json:"received_sha256"`
	// MismatchAt is the offset of the first received byte that differs
	// from the peer's pattern; -1 when none does.
	MismatchAt int64 `json:"mismatch_at"`
	// Seconds is the time from the start to the end of both directions.
	Seconds float64 `json:"seconds"`

	// Counters are the process's netconn.Counters() at the end (before
	// the connection closed): its RDMA devices' statistics.
	Counters verbs.Counters `json:"counters"`

	// Error is the first failure, empty when the exchange completed.
	Error string `json:"error,omitempty"`
	// ConnReset says that the failure Error reports wraps
	// syscall.ECONNRESET (errors.Is), as a lost connection's must.
	ConnReset bool `json:"conn_reset,omitempty"`
}

// Exchange sends cfg.Bytes of the side's pseudo-random stream on c and, at
// the same time, reads the peer's stream until EOF, hashing both
// directions with SHA-256 and checking what it reads against the peer's
// pattern. After its last byte it half-closes c (CloseWrite), and it
// returns once both directions have ended. It does not close c. The
// result's Transport, FallbackReason and Counters are left for the
// caller.
func Exchange(c net.Conn, cfg ExchangeConfig) *ExchangeResult {
	if cfg.WriteSize <= 0 {
		cfg.WriteSize = 64 << 10
	}
	if cfg.Stall <= 0 {
		cfg.Stall = DefaultStall
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 1 << 20
	}
	sendIndex, recvIndex := 0, 1
	if cfg.Listener {
		sendIndex, recvIndex = 1, 0
	}
	res := &ExchangeResult{MismatchAt: -1}
	start := time.Now()
	var (
		wg               sync.WaitGroup
		sendErr, recvErr error
		sentSum, recvSum []byte
	)
	wg.Go(func() {
		sentSum, sendErr = sendStream(c, cfg, streambench.NewPattern(cfg.Seed, sendIndex), &res.Sent)
		if sendErr != nil {
			// Unblock the reader too: the exchange has failed.
			c.SetReadDeadline(time.Unix(1, 0))
		}
	})
	wg.Go(func() {
		recvSum, recvErr = recvStream(c, cfg, streambench.NewPattern(cfg.Seed, recvIndex), res)
		if recvErr != nil {
			c.SetWriteDeadline(time.Unix(1, 0))
		}
	})
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	res.SentSHA256 = hex.EncodeToString(sentSum)
	res.ReceivedSHA256 = hex.EncodeToString(recvSum)
	// The first error in time is usually the cause; the other side's is
	// often the deadline set to stop it.
	var failure error
	switch {
	case sendErr != nil && !errors.Is(sendErr, os.ErrDeadlineExceeded):
		failure = sendErr
	case recvErr != nil && !errors.Is(recvErr, os.ErrDeadlineExceeded):
		failure = recvErr
	case sendErr != nil:
		failure = sendErr
	case recvErr != nil:
		failure = recvErr
	}
	switch {
	case failure != nil:
		res.Error = failure.Error()
		res.ConnReset = errors.Is(failure, syscall.ECONNRESET)
	case res.Received != cfg.Bytes:
		res.Error = fmt.Sprintf("received %d bytes, want %d", res.Received, cfg.Bytes)
	case res.MismatchAt >= 0:
		res.Error = fmt.Sprintf("received stream differs from the peer's pattern at offset %d", res.MismatchAt)
	}
	return res
}

// sendStream writes cfg.Bytes of p to c, paced to cfg.Rate, then
// half-closes c. It returns the SHA-256 of what it wrote.
func sendStream(c net.Conn, cfg ExchangeConfig, p *streambench.Pattern, sent *int64) ([]byte, error) {
	h := sha256.New()
	buf := make([]byte, cfg.WriteSize)
	start := time.Now()
	for *sent < cfg.Bytes {
		b := buf[:min(int64(len(buf)), cfg.Bytes-*sent)]
		p.Fill(b)
		h.Write(b)
		if cfg.Rate > 0 {
			time.Sleep(time.Until(paceDue(start, *sent+int64(len(b)), cfg.Rate)))
		}
		c.SetWriteDeadline(time.Now().Add(cfg.Stall))
		n, err := c.Write(b)
		*sent += int64(n)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				err = fmt.Errorf("stalled: no byte sent for %v: %w", cfg.Stall, err)
			}
			return h.Sum(nil), fmt.Errorf("write after %d bytes: %w", *sent, err)
		}
	}
	c.SetWriteDeadline(time.Time{})
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		if err := cw.CloseWrite(); err != nil {
			return h.Sum(nil), fmt.Errorf("close write: %w", err)
		}
	} else {
		return h.Sum(nil), fmt.Errorf("a %T cannot half-close", c)
	}
	return h.Sum(nil), nil
}

// paceDue is when a sender that started at start may have sent n bytes
// at rate bytes per second.
func paceDue(start time.Time, n, rate int64) time.Time {
	return start.Add(time.Duration(float64(n) / float64(rate) * float64(time.Second)))
}

// recvStream reads c to EOF, hashing and checking against p. It returns
// the SHA-256 of what it read.
func recvStream(c net.Conn, cfg ExchangeConfig, p *streambench.Pattern, res *ExchangeResult) ([]byte, error) {
	h := sha256.New()
	buf := make([]byte, 256<<10)
	nextProgress := cfg.ProgressEvery
	for {
		c.SetReadDeadline(time.Now().Add(cfg.Stall))
		n, err := c.Read(buf)
		if n > 0 {
			h.Write(buf[:n])
			if res.MismatchAt < 0 {
				if off, _, _, ok := p.Check(buf[:n]); !ok {
					res.MismatchAt = off
				}
			}
			res.Received += int64(n)
			for cfg.Progress != nil && res.Received >= nextProgress {
				cfg.Progress(res.Received)
				nextProgress += cfg.ProgressEvery
			}
		}
		if err == io.EOF {
			return h.Sum(nil), nil
		}
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) && res.Received < cfg.Bytes {
				err = fmt.Errorf("stalled: no byte received for %v after %d bytes: %w", cfg.Stall, res.Received, err)
			}
			return h.Sum(nil), fmt.Errorf("read after %d bytes: %w", res.Received, err)
		}
	}
}
