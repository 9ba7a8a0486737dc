package netlab

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// StartRelay starts the relay program (bin relay) in the lab's middle
// namespace, between A's and B's veths, and waits until it relays.
func (l *Lab) StartRelay(bin string, imp Impairment) (*Proc, error) {
	if l.M == nil {
		return nil, fmt.Errorf("netlab: the lab has no relay namespace (Config.Relay)")
	}
	if err := imp.Check(); err != nil {
		return nil, err
	}
	args := []string{"relay", "-a", l.M.Dev, "-b", l.M.Dev2,
		"-duplicate", fmt.Sprint(imp.Duplicate), "-reorder", fmt.Sprint(imp.Reorder),
		"-reorder-depth", fmt.Sprint(imp.ReorderDepth), "-reorder-hold", imp.ReorderHold.String(),
		"-seed", fmt.Sprint(imp.Seed)}
	p, err := l.Start(l.M, bin, args...)
	if err != nil {
		return nil, err
	}
	if _, err := WaitEvent(p, 30*time.Second, IsEvent(EventReady)); err != nil {
		p.Kill()
		return nil, err
	}
	return p, nil
}

// StopRelay ends a relay started by StartRelay (SIGTERM) and returns its
// counts.
func StopRelay(p *Proc) (*RelayReport, error) {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return nil, err
	}
	ev, err := WaitEvent(p, 30*time.Second, IsEvent(EventRelay))
	if err != nil {
		p.Kill()
		return nil, err
	}
	if err := p.Err(); err != nil {
		return ev.Relay, fmt.Errorf("%v: %v; stderr: %s", p, err, strings.TrimSpace(p.Stderr()))
	}
	return ev.Relay, nil
}

// ExchangeOptions configures StartExchange.
type ExchangeOptions struct {
	// Bytes each way, Seed, Rate and Stall are as in ExchangeConfig.
	Bytes int64
	Seed  uint64
	Rate  int64
	Stall time.Duration
	// IPv6 runs the exchange between the IPv6 addresses, else IPv4.
	IPv6 bool
	// Port of the listener in B; default 18700.
	Port int
	// ProgressEvery makes the dialer report each time it has received
	// that many more bytes (EventProgress); 0: no reports.
	ProgressEvery int64
}

// StartExchange starts the two sides of an exchange (bin exchange): the
// listener in B, then, once it listens, the dialer in A. Read their
// results with WaitEvent(p, timeout, IsEvent(EventResult)).
func (l *Lab) StartExchange(bin string, o ExchangeOptions) (listener, dialer *Proc, err error) {
	if o.Port == 0 {
		o.Port = 18700
	}
	addr := net.JoinHostPort(l.B.Addr(o.IPv6).String(), strconv.Itoa(o.Port))
	common := []string{"-bytes", fmt.Sprint(o.Bytes), "-seed", fmt.Sprint(o.Seed),
		"-rate", fmt.Sprint(o.Rate), "-stall", o.Stall.String(), "-progress", fmt.Sprint(o.ProgressEvery)}
	listener, err = l.Start(l.B, bin, append([]string{"exchange", "-listen", addr}, common...)...)
	if err != nil {
		return nil, nil, err
	}
	if _, err := WaitEvent(listener, 30*time.Second, IsEvent(EventListening)); err != nil {
		listener.Kill()
		return nil, nil, err
	}
	dialer, err = l.Start(l.A, bin, append([]string{"exchange", "-dial", addr}, common...)...)
	if err != nil {
		listener.Kill()
		return nil, nil, err
	}
	return listener, dialer, nil
}
