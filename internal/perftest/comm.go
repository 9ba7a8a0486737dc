package perftest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/rsock-go/rsock/verbs"
)

// Version is the perftest version this package speaks and announces.
const Version = "6.06"

// minPeerVersion is the oldest perftest that speaks this exchange; older
// ones refuse newer peers themselves.
const minPeerVersion = 5.70

// versionLen is the size of the version message (perftest's MAX_VERSION).
const versionLen = 16

// doneMsg ends the exchange of a test that closes it: "done" and its NUL.
const doneMsg = "done\x00"

// comm is perftest's TCP control connection. Every exchange is
// symmetric: the client writes its message and then reads the server's,
// the server reads first. Each message goes out in one write, because
// perftest reads each with a single read() and fails on a short one.
type comm struct {
	conn    net.Conn
	client  bool
	timeout time.Duration
	ctx     context.Context
}

// ErrPeerVersion reports a peer too old for this exchange.
var ErrPeerVersion = errors.New("perftest: peer version not supported")

// xchg sends mine and receives a message of len(rem) bytes into rem.
func (c *comm) xchg(what string, mine, rem []byte) error {
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	stop := context.AfterFunc(c.ctx, func() { c.conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if c.client {
		if err := c.write(what, mine); err != nil {
			return err
		}
		return c.read(what, rem)
	}
	if err := c.read(what, rem); err != nil {
		return err
	}
	return c.write(what, mine)
}

func (c *comm) write(what string, b []byte) error {
	if _, err := c.conn.Write(b); err != nil {
		return fmt.Errorf("perftest: send %s: %w", what, c.cause(err))
	}
	return nil
}

func (c *comm) read(what string, b []byte) error {
	if _, err := io.ReadFull(c.conn, b); err != nil {
		return fmt.Errorf("perftest: receive %s: %w", what, c.cause(err))
	}
	return nil
}

// cause prefers the context's error over the deadline it caused.
func (c *comm) cause(err error) error {
	if c.ctx.Err() != nil {
		return c.ctx.Err()
	}
	return err
}

// versions exchanges version strings and returns the peer's.
func (c *comm) versions() (string, error) {
	var mine, rem [versionLen]byte
	copy(mine[:], Version)
	if err := c.xchg("version", mine[:], rem[:]); err != nil {
		return "", err
	}
	v := cString(rem[:])
	if leadingFloat(v) < minPeerVersion {
		return v, fmt.Errorf("%w: peer is perftest %q, this side speaks %s (needs %.2f or later)", ErrPeerVersion, v, Version, minPeerVersion)
	}
	return v, nil
}

// sysData exchanges the cycle buffer and the cache line sizes (32-bit,
// big-endian) and returns the larger of each, as both sides then use.
func (c *comm) sysData(cycle, cacheLine int) (int, int, error) {
	var mine, rem [4]byte
	binary.BigEndian.PutUint32(mine[:], uint32(cycle))
	if err := c.xchg("cycle buffer size", mine[:], rem[:]); err != nil {
		return 0, 0, err
	}
	cycle = max(cycle, int(int32(binary.BigEndian.Uint32(rem[:]))))
	binary.BigEndian.PutUint32(mine[:], uint32(cacheLine))
	if err := c.xchg("cache line size", mine[:], rem[:]); err != nil {
		return 0, 0, err
	}
	cacheLine = max(cacheLine, int(int32(binary.BigEndian.Uint32(rem[:]))))
	if cycle <= 0 || cycle > maxCycleBuffer || cacheLine <= 0 || cacheLine > cycle {
		return 0, 0, fmt.Errorf("perftest: peer's cycle buffer %d or cache line %d out of range", cycle, cacheLine)
	}
	return cycle, cacheLine, nil
}

// maxCycleBuffer bounds the cycle buffer a peer can make us allocate.
const maxCycleBuffer = 1 << 24

// mtu exchanges path MTU codes, as two bytes of decimal text with a NUL,
// and returns the smaller valid one.
func (c *comm) mtu(mine verbs.MTU) (verbs.MTU, error) {
	var m, rem [2]byte
	copy(m[:], strconv.Itoa(int(mine)))
	if err := c.xchg("MTU", m[:], rem[:]); err != nil {
		return 0, err
	}
	r := verbs.MTU(leadingInt(cString(rem[:])))
	if r.Bytes() != 0 && r < mine {
		return r, nil
	}
	return mine, nil
}

// handShake exchanges address messages.
func (c *comm) handShake(mine Dest) (Dest, error) {
	var rem [DestLen]byte
	m := mine.Marshal()
	if err := c.xchg("address", m[:], rem[:]); err != nil {
		return Dest{}, err
	}
	return ParseDest(rem[:])
}

// sync is a handshake used only as a barrier: the peer's message must
// still parse.
func (c *comm) sync(mine Dest) error {
	_, err := c.handShake(mine)
	return err
}

// bwReports exchanges bandwidth reports: size and iterations as 64-bit
// integers, then peak and average bandwidth and message rate as IEEE
// doubles, each big-endian and in its own message.
func (c *comm) bwReports(mine BWReport) (BWReport, error) {
	vals := [5]uint64{mine.Size, mine.Iters, math.Float64bits(mine.PeakMBps), math.Float64bits(mine.AvgMBps), math.Float64bits(mine.MsgRateMpps)}
	var got [5]uint64
	for i, v := range vals {
		var m, rem [8]byte
		binary.BigEndian.PutUint64(m[:], v)
		if err := c.xchg("report", m[:], rem[:]); err != nil {
			return BWReport{}, err
		}
		got[i] = binary.BigEndian.Uint64(rem[:])
	}
	return BWReport{Size: got[0], Iters: got[1], PeakMBps: math.Float64frombits(got[2]),
		AvgMBps: math.Float64frombits(got[3]), MsgRateMpps: math.Float64frombits(got[4])}, nil
}

// close ends the exchange as perftest's ctx_close_connection does: a last
// handshake, then "done", then the connection is closed.
func (c *comm) close(mine Dest) error {
	if err := c.sync(mine); err != nil {
		return err
	}
	c.conn.SetDeadline(time.Now().Add(c.timeout))
	err := c.write("done", []byte(doneMsg))
	c.conn.Close()
	return err
}

// cString returns b up to its first NUL.
func cString(b []byte) string {
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return string(b[:i])
	}
	return string(b)
}

// leadingFloat parses the longest numeric prefix of s, as atof does; 0
// when there is none.
func leadingFloat(s string) float64 {
	s = strings.TrimLeft(s, " \t")
	end := 0
	for end < len(s) && (s[end] >= '0' && s[end] <= '9' || s[end] == '.' && !strings.Contains(s[:end], ".")) {
		end++
	}
	f, err := strconv.ParseFloat(strings.TrimSuffix(s[:end], "."), 64)
	if err != nil {
		return 0
	}
	return f
}

// leadingInt parses the decimal digits at the start of s, as strtol does;
// 0 when there are none or too many.
func leadingInt(s string) int {
	end := 0
	for end < len(s) && s[end] >= '0' && s[end] <= '9' {
		end++
	}
	n, err := strconv.Atoi(s[:end])
	if err != nil {
		return 0
	}
	return n
}
