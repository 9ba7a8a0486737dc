package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rsock-go/rsock/netconn"
)

// serverEnv, in the environment of the test binary, makes it the server:
// "conns,link,size,workers".
const serverEnv = "RSOCK_SCALE_SERVER"

// heapProfileEnv names a file for the server's heap profile, written
// while it holds every connection (-scale.heapprofile).
const heapProfileEnv = "RSOCK_SCALE_HEAPPROFILE"

// reportPrefix starts each line of the server's reports on its stdout.
const reportPrefix = "scale-report "

// report is one line of the server's progress.
type report struct {
	Phase      string         `json:"phase"` // listening, accepted, echoed, closed
	Addr       string         `json:"addr,omitempty"`
	NoFile     uint64         `json:"nofile,omitempty"`
	Usage      usage          `json:"usage"`
	Secs       float64        `json:"secs,omitempty"` // first to last accept
	Transports map[string]int `json:"transports,omitempty"`
	Err        string         `json:"err,omitempty"`
}

// serverArgs are the settings the test hands the server.
type serverArgs struct {
	conns   int
	link    string
	size    int
	workers int
}

func (a serverArgs) env() string {
	return fmt.Sprintf("%s=%d,%s,%d,%d", serverEnv, a.conns, a.link, a.size, a.workers)
}

func parseServerArgs(s string) (serverArgs, error) {
	f := strings.Split(s, ",")
	if len(f) != 4 {
		return serverArgs{}, fmt.Errorf("%s=%q: want conns,link,size,workers", serverEnv, s)
	}
	a := serverArgs{link: f[1]}
	var err [3]error
	a.conns, err[0] = strconv.Atoi(f[0])
	a.size, err[1] = strconv.Atoi(f[2])
	a.workers, err[2] = strconv.Atoi(f[3])
	for _, e := range err {
		if e != nil {
			return serverArgs{}, fmt.Errorf("%s=%q: %v", serverEnv, s, e)
		}
	}
	return a, nil
}

// runServer is the server process: it listens on loopback, accepts
// a.conns connections, echoes a.size bytes on each, closes them all when
// told to on stdin, and reports each phase on stdout. It returns the exit
// code.
func runServer(spec string) int {
	emit := func(r report) {
		b, _ := json.Marshal(r)
		fmt.Printf("%s%s\n", reportPrefix, b)
	}
	fail := func(phase string, err error) int {
		emit(report{Phase: phase, Err: err.Error()})
		return 1
	}
	a, err := parseServerArgs(spec)
	if err != nil {
		return fail("listening", err)
	}
	nofile, err := raiseNoFile(uint64(4*a.conns + 1024))
	if err != nil {
		return fail("listening", err)
	}
	// Every client here is an rsock dialer, so a longer sniff costs no
	// plain client its greeting. With the default 200 ms, a dialer whose
	// preface CI's load delayed past it (32 dials in flight under -race)
	// was taken for a silent plain client: its late preface resets that
	// connection on the first echo read (fallback.ErrLatePreface), and its
	// redial lands after the server has stopped accepting.
	lc := netconn.ListenConfig{Link: a.link, SniffTimeout: 5 * time.Second}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return fail("listening", err)
	}
	defer ln.Close()
	base, err := measure()
	if err != nil {
		return fail("listening", err)
	}
	emit(report{Phase: "listening", Addr: ln.Addr().String(), NoFile: nofile, Usage: base})

	conns := make([]net.Conn, 0, a.conns)
	transports := make(map[string]int)
	var first time.Time
	for len(conns) < a.conns {
		c, err := ln.Accept()
		if err != nil {
			return fail("accepted", fmt.Errorf("after %d connections: %w", len(conns), err))
		}
		if first.IsZero() {
			first = time.Now()
		}
		conns = append(conns, c)
		transports[describe(c)]++
	}
	secs := time.Since(first).Seconds()
	u, err := measure()
	if err != nil {
		return fail("accepted", err)
	}
	if f := os.Getenv(heapProfileEnv); f != "" {
		if err := writeHeapProfile(f); err != nil {
			return fail("accepted", err)
		}
	}
	emit(report{Phase: "accepted", Usage: u, Secs: secs, Transports: transports})

	// Echo: a few workers, each takes the next connection, reads a.size
	// bytes and writes them back. The client writes on every connection
	// before it reads any echo, so a worker never waits on a connection
	// whose data depends on another one's echo.
	var (
		next   = make(chan net.Conn)
		wg     sync.WaitGroup
		mu     sync.Mutex
		errs   []string
		failed int
	)
	for range a.workers {
		wg.Go(func() {
			buf := make([]byte, a.size)
			for c := range next {
				c.SetDeadline(time.Now().Add(5 * time.Minute))
				_, err := io.ReadFull(c, buf)
				if err == nil {
					_, err = c.Write(buf)
				}
				if err != nil {
					mu.Lock()
					if failed++; len(errs) < 5 {
						errs = append(errs, err.Error())
					}
					mu.Unlock()
				}
			}
		})
	}
	for _, c := range conns {
		next <- c
	}
	close(next)
	wg.Wait()
	u, err = measure()
	if err != nil {
		return fail("echoed", err)
	}
	r := report{Phase: "echoed", Usage: u}
	if failed > 0 {
		r.Err = fmt.Sprintf("%d connections failed to echo: %s", failed, strings.Join(errs, "; "))
	}
	emit(r)

	if line, err := bufio.NewReader(os.Stdin).ReadString('\n'); strings.TrimSpace(line) != "close" {
		return fail("closed", fmt.Errorf("want \"close\" on stdin, got %q (%v)", line, err))
	}
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	// Devices linger for 5 s after their last connection; wait for the
	// process to come back to its baseline, or report where it is.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if u, err = measure(); err != nil {
			return fail("closed", err)
		}
		if u.FDs <= base.FDs && u.Goroutines <= base.Goroutines && u.Devices == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(250 * time.Millisecond)
	}
	emit(report{Phase: "closed", Usage: u})
	return 0
}

// describe names a connection's transport, and for one on TCP why.
func describe(c net.Conn) string {
	nc, ok := c.(*netconn.Conn)
	if !ok {
		return fmt.Sprintf("%T", c)
	}
	if r := nc.FallbackReason(); r != "" {
		return nc.Transport() + " (" + r + ")"
	}
	return nc.Transport()
}

func writeHeapProfile(name string) error {
	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
