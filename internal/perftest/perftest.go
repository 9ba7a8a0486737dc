package perftest

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/rsock-go/rsock/internal/rocepeer"
	"github.com/rsock-go/rsock/verbs"
)

// Result is what one side did and reports.
type Result struct {
	Local, Remote Dest
	PeerVersion   string
	MTU           verbs.MTU // the path MTU both sides use
	// BW is the bandwidth table row this side prints. The server of
	// ib_write_bw and ib_read_bw is passive and prints the client's.
	BW BWReport
	// Lat is ib_write_lat's row, from this side's post times.
	Lat      LatReport
	Counters verbs.Counters
}

// Client runs cfg.Test as the client over conn, a TCP connection to a
// perftest server.
func Client(ctx context.Context, conn net.Conn, cfg Config) (*Result, error) {
	return run(ctx, conn, cfg, true)
}

// Server runs cfg.Test as the server over conn, a TCP connection accepted
// from a perftest client.
func Server(ctx context.Context, conn net.Conn, cfg Config) (*Result, error) {
	return run(ctx, conn, cfg, false)
}

func run(ctx context.Context, conn net.Conn, cfg Config, client bool) (*Result, error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	c := &comm{conn: conn, client: client, timeout: cfg.Timeout, ctx: ctx}
	defer conn.SetDeadline(time.Time{})
	res := &Result{}
	var err error

	// The parameter exchange: versions, buffer geometry, MTU.
	if res.PeerVersion, err = c.versions(); err != nil {
		return res, err
	}
	cycle, cacheLine, err := c.sysData(pageSize, cacheLineSize)
	if err != nil {
		return res, err
	}
	if res.MTU, err = c.mtu(cfg.MTU); err != nil {
		return res, err
	}

	addr, err := rocepeer.ForConn(cfg.RoCE, conn)
	if err != nil {
		return res, fmt.Errorf("perftest: %w", err)
	}
	s, err := open(cfg, addr, max(cfg.Size, cycle))
	if err != nil {
		return res, err
	}
	defer s.close()
	defer func() { res.Counters = s.dev.Counters() }()
	res.Local = s.self

	// An ib_send_bw server's receives are ready before the client may
	// send (perftest posts them before the last handshake).
	recvAt := newStepper(s.self.VAddr, cfg.Size, cacheLine, cycle)
	if cfg.Test == SendBW && !client {
		if err := s.postRecvs(&recvAt, cfg.RxDepth); err != nil {
			return res, err
		}
	}

	// The handshakes of each program, in its order.
	if cfg.Test == WriteLat {
		if err := c.sync(s.self); err != nil {
			return res, err
		}
	}
	if res.Remote, err = c.handShake(s.self); err != nil {
		return res, err
	}
	if res.Remote.GID.Addr().Is4In6() != s.self.GID.Addr().Is4In6() {
		return res, fmt.Errorf("perftest: GID types differ: ours %v, peer's %v", s.self.GID.Addr(), res.Remote.GID.Addr())
	}
	if err := s.connect(res.Remote, res.MTU); err != nil {
		return res, err
	}
	syncs := 2 // the "remote" print and the one after RTR
	if cfg.Test == SendBW {
		syncs = 3 // and the one after the receives are posted
	}
	for range syncs {
		if err := c.sync(s.self); err != nil {
			return res, err
		}
	}
	fmt.Fprintf(cfg.Log, " local address: %v\n remote address: %v\n", res.Local, res.Remote)

	switch {
	case cfg.Test == WriteLat:
		posted, err := s.latWrite(ctx, res.Remote, !client)
		if err != nil {
			return res, err
		}
		res.Lat = newLatReport(cfg.Size, posted)
		fmt.Fprint(cfg.Log, resultLine, latHeader, res.Lat.Line(), resultLine)
		s.linger(ctx)
		return res, nil
	case client:
		if res.BW, err = s.bwClient(ctx, res.Remote, cycle, cacheLine); err != nil {
			return res, err
		}
	case cfg.Test == SendBW:
		if res.BW, err = s.sendServer(ctx, &recvAt); err != nil {
			return res, err
		}
	default:
		// A passive WRITE or READ server: wait for the client to finish.
		if err := c.sync(s.self); err != nil {
			return res, fmt.Errorf("waiting for the client's test: %w", err)
		}
	}
	s.linger(ctx)
	if cfg.Test != SendBW {
		if client {
			if err := c.sync(s.self); err != nil {
				return res, err
			}
		}
		rem, err := c.bwReports(res.BW)
		if err != nil {
			return res, err
		}
		if !client {
			res.BW = rem
		}
	}
	fmt.Fprint(cfg.Log, resultLine, bwHeader, res.BW.Line(), resultLine)
	return res, c.close(s.self)
}

// linger keeps the queue pair open for cfg.Linger, so ACKs owed for the
// peer's last requests go out (and again, should it retry).
func (s *side) linger(ctx context.Context) {
	if s.cfg.Linger <= 0 {
		return
	}
	t := time.NewTimer(s.cfg.Linger)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
