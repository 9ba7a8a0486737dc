package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/internal/streambench"
	"github.com/rsock-go/rsock/netconn"
)

const streamUsage = `usage:
  rsockbench local  [-host 127.0.0.1] [flags]  server child process + client, on loopback or -host
  rsockbench server [-addr 127.0.0.1:18600] [-tcp-addr ADDR] [-verify] [-sessions N] [-debug-addr ADDR]
  rsockbench client [-addr 127.0.0.1:18600] [flags]

Compares rsock (package netconn) with plain TCP in the same run: for each
message size and connection count it measures one transport and then the
other (their order alternates), and prints a table per mode with the ratio
rsock/TCP. The rsock side runs with the library's settings: -provider and
-link, else RSOCK_PROVIDER and RSOCK_LINK, else auto (which never runs slower
than TCP: shm on one host, an rdma-core device between hosts, else TCP).
It prints what the rsock connections ran on, and why.

  stream    the client writes -sizes-byte messages for -duration on each of
            -conns connections; the server reads and counts. GB/s is decimal
            (10^9 B/s), from the server's clock.
  pingpong  each connection sends a message and waits for its echo, for
            -duration or -iters round trips; p50/p99/p999 round-trip times.

CPU seconds per GB is each process's getrusage time (user+system) during a
measurement over the bytes it moved; the server reports its own.

The server listens with netconn on -addr (the control connection and rsock
data connections) and with plain TCP on -tcp-addr (default: the same IP, port+1,
or an ephemeral port announced to the client when -addr has port 0).

-verify sends a deterministic pseudo-random stream that the server checks
byte for byte; a server run with -verify demands it, and exits non-zero on the
first mismatch. -bytes N makes each stream connection send exactly N bytes
(then -sizes defaults to 1MiB, -conns to 1, -transports to rsock, and only the
stream mode runs):

  rsockbench server -verify -addr 10.0.0.1:18600
  rsockbench client -verify -bytes 1GiB -addr 10.0.0.1:18600

Flags:
`

// Defaults of the sweep.
const (
	defaultStreamAddr = "127.0.0.1:18600"
	defaultSizes      = "64B,1KiB,16KiB,64KiB,1MiB"
	defaultConns      = "1,8"
	defaultModes      = "stream,pingpong"
	defaultTransports = "rsock,tcp"
	defaultDuration   = time.Second
	defaultIters      = 10000
)

// streamServerPrefix starts the line a server prints once it listens;
// serverProcsSep comes before its GOMAXPROCS at the end of the line.
const (
	streamServerPrefix = "rsockbench server: rsock on "
	serverProcsSep     = ", gomaxprocs "
)

// streamFlags holds the flags of local, server and client.
type streamFlags struct {
	addr, tcpAddr, provider, link, host     string
	tcpCC                                   string
	sizes, conns, modes, transports, nbytes string
	jsonPath, plotPath, cpuProfile          string
	debugAddr                               string
	duration, timeout                       time.Duration
	iters, sessions                         int
	procs, serverProcs                      int // local: -procs, and the server child's GOMAXPROCS
	seed                                    uint64
	corruptAt                               int64
	verify, verbose, counters               bool
}

// newStreamFlagSet declares the flags of a subcommand: local, server or
// client.
func newStreamFlagSet(cmd string, f *streamFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), streamUsage)
		// -corrupt-at is a test hook: left out of the list.
		fs.VisitAll(func(fl *flag.Flag) {
			if fl.Name == "corrupt-at" {
				return
			}
			name, usage := flag.UnquoteUsage(fl)
			if name != "" {
				name = " " + name
			}
			fmt.Fprintf(fs.Output(), "  -%s%s\n    \t%s", fl.Name, name, strings.ReplaceAll(usage, "\n", "\n    \t"))
			if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" {
				fmt.Fprintf(fs.Output(), " (default %s)", fl.DefValue)
			}
			fmt.Fprintln(fs.Output())
		})
	}
	if cmd != "local" {
		fs.StringVar(&f.addr, "addr", defaultStreamAddr, "the server's netconn address: control and rsock data connections")
	} else {
		fs.StringVar(&f.host, "host", "127.0.0.1", "local IP both processes use (the server listens on it, port 0): an address\nwith a RoCEv2 GID lets -provider rdmacore run on the device that has it")
	}
	fs.StringVar(&f.provider, "provider", "", "netconn provider of the rsock side, in both processes: auto, softroce, rdmacore (built with -tags rdmacore)\nor tcp (default: $"+netconn.EnvProvider+", else auto)")
	fs.StringVar(&f.link, "link", "", "netconn link of the rsock side, in both processes: auto (shm on one host, an rdma-core\ndevice's port, else TCP), shm, memif, udp, or dpdk (built with -tags dpdk) (default: $"+netconn.EnvLink+", else auto)")
	fs.DurationVar(&f.timeout, "timeout", streambench.DefaultTimeout, "give up a wait for the peer after this long")
	fs.StringVar(&f.cpuProfile, "cpuprofile", "", "write a CPU profile of this process to this file (local: the server child's to FILE.server)")
	fs.BoolVar(&f.verify, "verify", false, "send a deterministic pseudo-random stream, checked byte for byte by the server")
	if cmd != "local" {
		fs.BoolVar(&f.counters, "counters", false, "at exit, print the RDMA device counters of the process (netconn.Counters) on stderr,\nas one JSON line after \""+countersPrefix+"\"")
		fs.StringVar(&f.debugAddr, "debug-addr", "", "serve /debug/vars (expvar, with rsock's snapshot) and /metrics (Prometheus) over HTTP on this address;\n'rsockbench stat -addr ADDR' prints them")
	}
	if cmd == "server" {
		fs.StringVar(&f.tcpAddr, "tcp-addr", "", "plain TCP address (default: -addr's IP, port+1; ephemeral if -addr's port is 0)")
		fs.IntVar(&f.sessions, "sessions", 0, "exit after serving this many client sessions (0: serve until interrupted)")
		return fs
	}
	if cmd == "client" {
		fs.StringVar(&f.tcpAddr, "tcp-addr", "", "the server's plain TCP address (default: -addr's host, the port the server announces)")
		fs.StringVar(&f.tcpCC, "tcp-cc", "", "congestion control of the plain TCP connections, e.g. cubic or bbr (TCP_CONGESTION, Linux; default: the system's)")
	} else {
		fs.BoolVar(&f.verbose, "v", false, "show the server child's output on stderr")
		fs.IntVar(&f.procs, "procs", 0, "GOMAXPROCS of both processes, for TCP and rsock alike (0: Go's default, one per CPU)")
	}
	fs.StringVar(&f.sizes, "sizes", defaultSizes, "message sizes, comma-separated (B, KiB, MiB suffixes)")
	fs.StringVar(&f.conns, "conns", defaultConns, "connection counts, comma-separated")
	fs.StringVar(&f.modes, "modes", defaultModes, "modes to run: stream, pingpong")
	fs.StringVar(&f.transports, "transports", defaultTransports, "transports to compare: rsock, tcp")
	fs.DurationVar(&f.duration, "duration", defaultDuration, "run each measurement this long")
	fs.IntVar(&f.iters, "iters", defaultIters, "at most this many ping-pong round trips per connection and measurement (0: no cap)")
	fs.StringVar(&f.nbytes, "bytes", "", "stream exactly this many bytes per connection instead of -duration (e.g. 1073741824 or 1GiB)")
	fs.Uint64Var(&f.seed, "seed", 1, "seed of the -verify stream")
	fs.StringVar(&f.jsonPath, "json", "", "write one JSON record per measurement to this file (- for stdout)")
	fs.StringVar(&f.plotPath, "plot", "", "write an SVG chart of throughput and p50 latency against size to this file")
	fs.Int64Var(&f.corruptAt, "corrupt-at", -1, "test hook: flip the byte at this offset of the first connection's -verify stream")
	return fs
}

// parseStreamFlags parses args; ok false means exit with code.
func parseStreamFlags(fs *flag.FlagSet, args []string, stderr io.Writer) (ok bool, code int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, exitOK
		}
		return false, exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rsockbench %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false, exitUsage
	}
	var provider, link string
	if fl := fs.Lookup("provider"); fl != nil {
		provider = fl.Value.String()
	}
	if fl := fs.Lookup("link"); fl != nil {
		link = fl.Value.String()
	}
	if _, _, err := netconn.Settings(provider, link); err != nil {
		fmt.Fprintf(stderr, "rsockbench %s: %v\n", fs.Name(), err)
		return false, exitUsage
	}
	return true, 0
}

// sweep turns the client flags into a Sweep.
func (f *streamFlags) sweep(fs *flag.FlagSet) (*streambench.Sweep, error) {
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	s := &streambench.Sweep{Duration: f.duration, Iters: f.iters, Verify: f.verify, Seed: f.seed}
	if f.nbytes != "" {
		n, err := streambench.ParseSize(f.nbytes)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("-bytes %q: want a positive byte count", f.nbytes)
		}
		s.Bytes = n
		if set["modes"] && f.modes != streambench.ModeStream {
			return nil, errors.New("-bytes runs the stream mode only")
		}
		f.modes = streambench.ModeStream
		if !set["sizes"] {
			f.sizes = "1MiB"
		}
		if !set["conns"] {
			f.conns = "1"
		}
		if !set["transports"] {
			f.transports = streambench.TransportRsock
		}
	}
	var err error
	if s.Sizes, err = streambench.ParseSizes(f.sizes); err != nil {
		return nil, fmt.Errorf("-sizes: %v", err)
	}
	for _, c := range strings.Split(f.conns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > streambench.MaxConns {
			return nil, fmt.Errorf("-conns: %q is not a count in 1..%d", c, streambench.MaxConns)
		}
		s.Conns = append(s.Conns, n)
	}
	for _, m := range strings.Split(f.modes, ",") {
		m = strings.TrimSpace(m)
		if m != streambench.ModeStream && m != streambench.ModePingPong {
			return nil, fmt.Errorf("-modes: unknown mode %q (want stream, pingpong)", m)
		}
		s.Modes = append(s.Modes, m)
	}
	for _, t := range strings.Split(f.transports, ",") {
		t = strings.TrimSpace(t)
		if t != streambench.TransportRsock && t != streambench.TransportTCP {
			return nil, fmt.Errorf("-transports: unknown transport %q (want rsock, tcp)", t)
		}
		s.Transports = append(s.Transports, t)
	}
	if s.Bytes == 0 && f.duration <= 0 {
		return nil, fmt.Errorf("-duration %v must be positive", f.duration)
	}
	if f.iters < 0 {
		return nil, fmt.Errorf("-iters %d is negative", f.iters)
	}
	if f.corruptAt >= 0 {
		if !f.verify {
			return nil, errors.New("-corrupt-at needs -verify")
		}
		s.Corrupt, s.CorruptAt = true, f.corruptAt
	}
	return s, nil
}

// runLocal is "rsockbench local": a server child process and the client.
func runLocal(args []string, stdout, stderr io.Writer) int {
	var f streamFlags
	fs := newStreamFlagSet("local", &f, stderr)
	if ok, code := parseStreamFlags(fs, args, stderr); !ok {
		return code
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench: %v\n", err)
		return exitFail
	}
	defer stopProfile()
	s, err := f.sweep(fs)
	if err == nil {
		if _, perr := netip.ParseAddr(f.host); perr != nil {
			err = fmt.Errorf("-host %q: want an IP address", f.host)
		}
	}
	if err == nil && f.procs < 0 {
		err = fmt.Errorf("-procs %d is negative", f.procs)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench local: %v\n", err)
		return exitUsage
	}
	if f.procs > 0 {
		// Both processes: this one now, the server child through the
		// runtime's environment variable.
		runtime.GOMAXPROCS(f.procs)
		childEnv = append(childEnv, "GOMAXPROCS="+strconv.Itoa(f.procs))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := streamLocal(ctx, &f, s, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "rsockbench local: %v\n", err)
		return exitFail
	}
	return exitOK
}

// runClient is "rsockbench client".
func runClient(args []string, stdout, stderr io.Writer) int {
	var f streamFlags
	fs := newStreamFlagSet("client", &f, stderr)
	if ok, code := parseStreamFlags(fs, args, stderr); !ok {
		return code
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench: %v\n", err)
		return exitFail
	}
	defer stopProfile()
	s, err := f.sweep(fs)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench client: %v\n", err)
		return exitUsage
	}
	if f.debugAddr != "" {
		// Announced on stderr: stdout is the tables (or -json -).
		stopDebug, err := serveDebug(f.debugAddr, stderr)
		if err != nil {
			fmt.Fprintf(stderr, "rsockbench client: -debug-addr: %v\n", err)
			return exitFail
		}
		defer stopDebug()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	err = streamClient(ctx, &f, s, f.addr, stdout, stderr)
	if f.counters {
		printCounters(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench client: %v\n", err)
		return exitFail
	}
	return exitOK
}

// runServer is "rsockbench server".
func runServer(args []string, stdout, stderr io.Writer) int {
	var f streamFlags
	fs := newStreamFlagSet("server", &f, stderr)
	if ok, code := parseStreamFlags(fs, args, stderr); !ok {
		return code
	}
	stopProfile, err := startCPUProfile(f.cpuProfile)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench: %v\n", err)
		return exitFail
	}
	defer stopProfile()
	tcpAddr, err := defaultTCPAddr(f.addr, f.tcpAddr)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench server: %v\n", err)
		return exitUsage
	}
	if f.sessions < 0 {
		fmt.Fprintf(stderr, "rsockbench server: -sessions %d is negative\n", f.sessions)
		return exitUsage
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer netconn.CloseIdleDevices() // on SIGTERM too: a DPDK port cleans up as it closes
	// rsockbench's clients speak first, so a long sniff costs nothing, and
	// it rides out a preface lost on a lossy path (TCP sends it again
	// after at least 200 ms, the default sniff, and backs off from there):
	// the sniff and the handshake may take as long as any other wait.
	lc := netconn.ListenConfig{Provider: f.provider, Link: f.link,
		SniffTimeout: max(2*time.Second, f.timeout), HandshakeTimeout: max(netconn.DefaultHandshakeTimeout, f.timeout)}
	rln, err := lc.Listen(ctx, "tcp", f.addr)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench server: %v\n", err)
		return exitFail
	}
	var nlc net.ListenConfig
	tln, err := nlc.Listen(ctx, "tcp", tcpAddr)
	if err != nil {
		rln.Close()
		fmt.Fprintf(stderr, "rsockbench server: %v\n", err)
		return exitFail
	}
	if f.debugAddr != "" {
		stopDebug, err := serveDebug(f.debugAddr, stdout)
		if err != nil {
			rln.Close()
			tln.Close()
			fmt.Fprintf(stderr, "rsockbench server: -debug-addr: %v\n", err)
			return exitFail
		}
		defer stopDebug()
	}
	fmt.Fprintf(stdout, "%s%s, tcp on %s%s%d\n", streamServerPrefix, rln.Addr(), tln.Addr(), serverProcsSep, runtime.GOMAXPROCS(0))
	err = streambench.Serve(ctx, rln, tln, streambench.ServerConfig{Verify: f.verify, Sessions: f.sessions, Timeout: f.timeout, Log: stdout})
	if f.counters {
		printCounters(stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench server: %v\n", err)
		return exitFail
	}
	return exitOK
}

// countersPrefix starts the line -counters prints.
const countersPrefix = "rsockbench counters: "

// printCounters writes netconn.Counters() as one JSON line after
// countersPrefix. Devices stay open a few seconds after their last
// connection, so at exit they still hold the counts of the run.
func printCounters(w io.Writer) {
	b, err := json.Marshal(netconn.Counters())
	if err != nil {
		fmt.Fprintf(w, "rsockbench: counters: %v\n", err)
		return
	}
	fmt.Fprintf(w, "%s%s\n", countersPrefix, b)
}

// defaultTCPAddr is the plain TCP address: given, or addr's IP at port+1
// (port 0 stays 0).
func defaultTCPAddr(addr, tcpAddr string) (string, error) {
	if tcpAddr != "" {
		return tcpAddr, nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("-addr %q: %v", addr, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65534 {
		return "", fmt.Errorf("-addr %q: give a numeric port below 65535, or -tcp-addr", addr)
	}
	if p != 0 {
		p++
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// isTerminal reports whether w is a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// streamClient runs the sweep against the server at addr and writes the
// tables, the -json records and the -plot chart.
func streamClient(ctx context.Context, f *streamFlags, s *streambench.Sweep, addr string, stdout, stderr io.Writer) error {
	c, err := streambench.Dial(ctx, streambench.ClientConfig{Addr: addr, TCPAddr: f.tcpAddr, Provider: f.provider, Link: f.link, Timeout: f.timeout, TCPCongestion: f.tcpCC})
	if err != nil {
		return err
	}
	if c.ServerVerifies() && !s.Verify {
		c.Close()
		return errors.New("the server verifies every byte: run the client with -verify")
	}
	if isTerminal(stderr) {
		start := time.Now()
		s.Progress = func(n, total int, p streambench.Point) {
			fmt.Fprintf(stderr, "\r\033[K[%d/%d] %s %s %s x%d ... %.0fs", n, total, p.Mode, p.Transport,
				streambench.FormatSize(p.Size), p.Conns, time.Since(start).Seconds())
		}
	}
	recs, err := s.Run(ctx, c)
	if s.Progress != nil {
		fmt.Fprint(stderr, "\r\033[K")
	}
	if err == nil {
		err = c.Close()
	} else {
		c.Close()
	}
	for i := range recs {
		recs[i].ClientProcs, recs[i].ServerProcs = runtime.GOMAXPROCS(0), f.serverProcs
	}
	streambench.WriteTables(stdout, recs)
	writeRanOn(stdout, f, recs)
	if s.Verify {
		var v uint64
		for _, r := range recs {
			v += r.VerifiedBytes
		}
		fmt.Fprintf(stdout, "verified %d bytes in %d measurements, no mismatch\n", v, len(recs))
	}
	if s.Bytes > 0 {
		for _, r := range recs {
			fmt.Fprintf(stdout, "%s %s (%s) %s x%d: %d bytes in %.3fs, %.3f GB/s\n", r.Mode, r.Transport, r.ConnTransport,
				streambench.FormatSize(r.Size), r.Conns, r.Bytes, r.Seconds, r.GBps)
		}
	}
	if werr := writeOutputs(f, recs, stdout); err == nil {
		err = werr
	}
	return err
}

// writeRanOn prints the settings of the rsock side and what its
// connections ran on, and why: each distinct transport and reason once.
func writeRanOn(w io.Writer, f *streamFlags, recs []*streambench.Record) {
	provider, link, _ := netconn.Settings(f.provider, f.link)
	seen := map[string]bool{}
	for _, r := range recs {
		if r.Transport != streambench.TransportRsock {
			continue
		}
		line := fmt.Sprintf("rsock (provider %s, link %s) ran on %s (server: %s)", provider, link, r.ConnTransport, r.ServerTransport)
		if r.FallbackReason != "" {
			line += ": " + r.FallbackReason
		}
		if !seen[line] {
			seen[line] = true
			fmt.Fprintln(w, line)
		}
	}
}

// writeOutputs writes the -json and -plot files.
func writeOutputs(f *streamFlags, recs []*streambench.Record, stdout io.Writer) error {
	if f.jsonPath == "-" {
		if err := streambench.WriteJSON(stdout, recs); err != nil {
			return err
		}
	} else if f.jsonPath != "" {
		if err := writeFile(f.jsonPath, func(w io.Writer) error { return streambench.WriteJSON(w, recs) }); err != nil {
			return fmt.Errorf("-json: %w", err)
		}
	}
	if f.plotPath != "" {
		if err := writeFile(f.plotPath, func(w io.Writer) error { return streambench.WritePlot(w, recs) }); err != nil {
			return fmt.Errorf("-plot: %w", err)
		}
	}
	return nil
}

func writeFile(path string, write func(io.Writer) error) error {
	file, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(file); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// streamLocal starts "rsockbench server" as a child process on loopback,
// runs the client against it, and reaps the child.
func streamLocal(ctx context.Context, f *streamFlags, s *streambench.Sweep, stdout, stderr io.Writer) (err error) {
	_, link, err := netconn.Settings(f.provider, f.link)
	if err != nil {
		return err
	}
	if setup, ok := localLinks[link]; ok {
		cleanup, err := setup()
		if err != nil {
			return err
		}
		defer cleanup()
	}
	// Devices linger after their last connection: close them before the
	// process exits, so that a DPDK port cleans its environment up.
	defer netconn.CloseIdleDevices()
	// The child inherits RSOCK_PROVIDER and RSOCK_LINK; flags override
	// them in both processes.
	args := []string{"server", "-addr", net.JoinHostPort(f.host, "0"), "-sessions", "1", "-timeout", f.timeout.String()}
	if f.provider != "" {
		args = append(args, "-provider", f.provider)
	}
	if f.link != "" {
		args = append(args, "-link", f.link)
	}
	if f.cpuProfile != "" {
		args = append(args, "-cpuprofile", f.cpuProfile+".server")
	}
	if f.verify {
		args = append(args, "-verify")
	}
	var rest io.Writer
	if f.verbose {
		rest = prefixWriter{w: stderr, prefix: "server: "}
	}
	child, err := startServerChild(args, rest, prefixWriter{w: stderr, prefix: "server: "})
	if err != nil {
		return err
	}
	defer func() { err = child.finish(err) }()
	line, err := child.firstLine(ctx, f.timeout)
	if err != nil {
		return err
	}
	after, ok := strings.CutPrefix(line, streamServerPrefix)
	addr, _, ok2 := strings.Cut(after, ",")
	if !ok || !ok2 {
		return fmt.Errorf("server child failed to start (first output %q)", line)
	}
	if f.verbose {
		fmt.Fprintf(stderr, "server: pid %d: %s\n", child.pid(), line)
	}
	if pc := os.Getenv(netconn.EnvPcap); pc != "" {
		// Each process writes its own file (netconn.EnvPcap).
		fmt.Fprintf(stderr, "packet captures: %s (client), %s (server)\n",
			netconn.CapturePath(pc, os.Getpid()), netconn.CapturePath(pc, child.pid()))
	}
	if _, p, ok := strings.Cut(after, serverProcsSep); ok {
		f.serverProcs, _ = strconv.Atoi(p)
	}
	if f.procs > 0 && f.serverProcs != f.procs {
		return fmt.Errorf("the server child runs with GOMAXPROCS %d, not -procs %d", f.serverProcs, f.procs)
	}
	fmt.Fprintf(stdout, "GOMAXPROCS %d in the client, %d in the server; %d CPUs\n\n", runtime.GOMAXPROCS(0), f.serverProcs, runtime.NumCPU())
	return streamClient(ctx, f, s, addr, stdout, stderr)
}

// localLinks configure a link that build-tagged files add (dpdk) for
// "local": the wire between this process and the server child. setup
// sets this process's environment and childEnv, and returns what undoes
// it.
var localLinks = map[string]func() (cleanup func(), err error){}

// startCPUProfile starts writing a CPU profile to path (nothing if path
// is empty); the returned function stops it.
func startCPUProfile(path string) (func(), error) {
	if path == "" {
		return func() {}, nil
	}
	file, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(file); err != nil {
		file.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); file.Close() }, nil
}
