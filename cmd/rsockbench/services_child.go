package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/rsock-go/rsock/bench/services"
	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/netconn"
)

// The services server child talks to its parent over its standard input
// and output, which work across network namespaces: it prints
// svcReadyPrefix and a svcReady as JSON once it listens, then answers
// every line "stats" with svcStatsPrefix and a svcStats as JSON (and
// "release" the same way, after closing the rsock devices no connection
// uses), and exits when its standard input ends.
const (
	svcReadyPrefix = "rsockbench services server: "
	svcStatsPrefix = "rsockbench services stats: "
	svcStatsCmd    = "stats"
	svcReleaseCmd  = "release"
)

// svcReady is what the server child announces.
type svcReady struct {
	PID   int               `json:"pid"`
	Procs int               `json:"gomaxprocs"`
	Addrs map[string]string `json:"addrs"` // by svcKey
}

// svcStats is the server child's CPU time and its listeners' connection
// counts so far, by svcKey.
type svcStats struct {
	CPU     time.Duration             `json:"cpu_ns"`
	Conns   map[string]map[string]int `json:"conns"`
	Reasons map[string]map[string]int `json:"reasons"`
	Open    map[string]int            `json:"open"` // connections not closed yet
}

// svcKey names a service's listener on a transport.
func svcKey(transport, service string) string { return transport + " " + service }

// serveServices is the server child: every service on every transport,
// until its standard input ends.
func serveServices(ctx context.Context, trs []services.Transport, svcs []services.Service, host string, in io.Reader, out io.Writer) (err error) {
	defer netconn.CloseIdleDevices()
	dir, err := os.MkdirTemp("", "rsockbench-services-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	ready := svcReady{PID: os.Getpid(), Procs: runtime.GOMAXPROCS(0), Addrs: map[string]string{}}
	tallies := map[string]*services.Tally{}
	var stops []func() error
	defer func() {
		for _, stop := range stops {
			err = errors.Join(err, stop())
		}
	}()
	for _, tr := range trs {
		for _, svc := range svcs {
			key := svcKey(tr.Name, svc.Name())
			ln, err := tr.Listen(ctx, host, dir, svc.Name())
			if err != nil {
				return fmt.Errorf("%s: listen: %w", key, err)
			}
			t := &services.Tally{}
			stop, err := svc.Serve(&services.CountingListener{Listener: ln, Tally: t})
			if err != nil {
				ln.Close()
				return fmt.Errorf("%s: %w", key, err)
			}
			stops = append(stops, stop)
			tallies[key] = t
			ready.Addrs[key] = ln.Addr().String()
		}
	}
	if err := writeLine(out, svcReadyPrefix, ready); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		switch sc.Text() {
		case svcStatsCmd:
		case svcReleaseCmd:
			netconn.CloseIdleDevices()
		default:
			return fmt.Errorf("unknown request %q from the parent", sc.Text())
		}
		st := svcStats{CPU: proccpu.Total(), Conns: map[string]map[string]int{}, Reasons: map[string]map[string]int{}, Open: map[string]int{}}
		for key, t := range tallies {
			st.Conns[key], st.Reasons[key] = t.Counts()
			st.Open[key] = t.Open()
		}
		if err := writeLine(out, svcStatsPrefix, st); err != nil {
			return err
		}
	}
	return sc.Err()
}

// writeLine writes prefix and v as JSON on one line.
func writeLine(w io.Writer, prefix string, v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(w, "%s%s\n", prefix, b)
	return err
}

// svcChild is the server child as its parent sees it.
type svcChild struct {
	cmd    *exec.Cmd
	in     io.WriteCloser
	lines  chan string   // its standard output, a line at a time
	dead   chan struct{} // closed once it exited and was reaped
	status error         // its exit status, once dead is closed
	ready  svcReady
	mu     sync.Mutex // one stats exchange at a time
}

// startSvcChild starts this executable with args (inside the network
// namespace netns, by ip netns exec, if it is not empty) and waits up to
// timeout for it to listen.
func startSvcChild(ctx context.Context, netns string, args []string, env []string, stderr io.Writer, timeout time.Duration) (*svcChild, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find own executable: %w", err)
	}
	cmd := exec.Command(exe, args...)
	if netns != "" {
		// ip execs the program in its own process: the child's PID is
		// rsockbench's.
		cmd = exec.Command("ip", append([]string{"netns", "exec", netns, exe}, args...)...)
	}
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = prefixWriter{w: stderr, prefix: "server: "}
	cmd.SysProcAttr = childSysProcAttr()
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start server: %w", err)
	}
	c := &svcChild{cmd: cmd, in: in, lines: make(chan string, 1), dead: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.lines <- sc.Text()
		}
		close(c.lines)
		c.status = cmd.Wait()
		close(c.dead)
	}()
	line, err := c.line(ctx, timeout)
	if err == nil {
		after, ok := strings.CutPrefix(line, svcReadyPrefix)
		if !ok {
			err = fmt.Errorf("server child failed to start (first output %q)", line)
		} else if err = json.Unmarshal([]byte(after), &c.ready); err != nil {
			err = fmt.Errorf("server child's announcement %q: %w", line, err)
		}
	}
	if err != nil {
		return nil, c.finish(err)
	}
	return c, nil
}

// line waits for the child's next line of output.
func (c *svcChild) line(ctx context.Context, timeout time.Duration) (string, error) {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case line, ok := <-c.lines:
		if !ok {
			return "", c.exitError()
		}
		return line, nil
	case <-timer.C:
		return "", fmt.Errorf("server child did not answer within %v", timeout)
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// stats asks the child for its CPU time and connection counts.
func (c *svcChild) stats(ctx context.Context) (svcStats, error) {
	return c.ask(ctx, svcStatsCmd)
}

// ask sends the child a request, and returns the stats it answers with.
func (c *svcChild) ask(ctx context.Context, req string) (svcStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st svcStats
	if _, err := io.WriteString(c.in, req+"\n"); err != nil {
		select {
		case <-c.dead:
			return st, c.exitError()
		case <-time.After(time.Second):
			return st, fmt.Errorf("server child: %w", err)
		}
	}
	line, err := c.line(ctx, 10*time.Second)
	if err != nil {
		return st, err
	}
	after, ok := strings.CutPrefix(line, svcStatsPrefix)
	if !ok {
		return st, fmt.Errorf("server child said %q, want its stats", line)
	}
	return st, json.Unmarshal([]byte(after), &st)
}

// finish ends the child: at once (by its PID) when the run failed with
// err, otherwise by closing its standard input and waiting up to 10 s for
// it to exit. It returns the run's error, or the child's.
func (c *svcChild) finish(err error) error {
	c.in.Close()
	if err == nil {
		timer := time.NewTimer(10 * time.Second)
		defer timer.Stop()
	drain:
		for {
			select {
			case _, ok := <-c.lines:
				if ok {
					continue
				}
				<-c.dead
				if c.status != nil {
					return fmt.Errorf("server child: %w", c.status)
				}
				return nil
			case <-timer.C:
				err = errors.New("server child did not exit after the run; killed it")
				break drain
			}
		}
	}
	c.cmd.Process.Kill()
	for range c.lines {
	}
	<-c.dead
	return err
}

// exitError says that the child exited, and how, once it has been
// reaped (within a second of the end of its output).
func (c *svcChild) exitError() error {
	select {
	case <-c.dead:
		return fmt.Errorf("server child exited (%v)", c.status)
	case <-time.After(time.Second):
		return errors.New("server child closed its output")
	}
}

// settle waits until the server has closed the connections of key's
// listener (the client closed its side) and then has both processes
// close the rsock devices that no connection uses, so that what one
// point leaves behind does not run during the next. It gives up waiting
// after timeout, and says so.
func (c *svcChild) settle(ctx context.Context, key string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.stats(ctx)
		if err != nil {
			return err
		}
		if st.Open[key] == 0 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: the server still has %d connections open %v after the client closed them", key, st.Open[key], timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	netconn.CloseIdleDevices()
	_, err := c.ask(ctx, svcReleaseCmd)
	return err
}

// diffCounts is after minus before, without the zeros.
func diffCounts(after, before map[string]int) map[string]int {
	d := maps.Clone(after)
	if d == nil {
		d = map[string]int{}
	}
	for k, n := range before {
		d[k] -= n
		if d[k] == 0 {
			delete(d, k)
		}
	}
	return d
}

// exitedNow reports whether the child has exited.
func (c *svcChild) exitedNow() bool {
	select {
	case <-c.dead:
		return true
	default:
		return false
	}
}
