package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/bench/services"
	"github.com/rsock-go/rsock/internal/proccpu"
	"github.com/rsock-go/rsock/netconn"
)

const servicesUsage = `usage: rsockbench services [flags]

Real Go services, two processes: a server child and this client, compared
over each transport in the same run, back to back:

  grpc   grpc-go's BenchmarkService.UnaryCall (protobuf), all callers on
         one grpc.ClientConn
  redis  a Redis-protocol server (tidwall/redcon) and go-redis with a pool
         of one connection per caller, SET and GET alternately
  http   net/http: POST /echo, http.Transport with keep-alives and up
         to one connection per caller

Each caller makes one call at a time, with a -size-byte payload that the
reply must carry back intact; a point runs -warmup (and until every caller
has had a reply), then is measured for -duration: requests per second, p50
and p99 latency, and the CPU time per request of each process, with ratios
to tcp's point in the same run. Between points the server's connections
close and both processes close their idle rsock devices.

Transports:
  tcp                  plain TCP (package net)
  rsock                netconn with the library's defaults (RSOCK_PROVIDER and
                       RSOCK_LINK apply, as in any program)
  rsock:LINK           netconn with this link (shm, memif, udp, ...)
  rsock:PROVIDER/LINK  netconn with this provider and link (rsock:PROVIDER/: provider only)
  unix                 the kernel's Unix sockets, for scale (one host only)

Every connection reports what it ran on (netconn's Transport(), and
FallbackReason() when it fell back to TCP); the table counts them.

-netns makes the two processes two hosts: network namespaces joined
through a router namespace (one hop, -mtu on every veth), and removes
them at the end. It needs root and ip (iproute2).

Flags:
`

// servicesFlags holds the flags of services.
type servicesFlags struct {
	services, transports, callers, host, jsonPath string
	duration, warmup, stuck, timeout              time.Duration
	size, procs, mtu, rounds                      int
	netns, verbose                                bool
	// Internal: the server child's mode, and the network namespace of
	// the server (set by -netns for the client it starts).
	serve       bool
	serverNetns string
}

func newServicesFlagSet(f *servicesFlags, stderr io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet("services", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&f.services, "services", "grpc,redis,http", "services to run: grpc, redis, http")
	fs.StringVar(&f.transports, "transports", "tcp,rsock", "transports to compare: tcp, rsock, rsock:LINK, rsock:PROVIDER/LINK, unix")
	fs.StringVar(&f.callers, "callers", "1,32", "concurrent callers, comma-separated")
	fs.DurationVar(&f.duration, "duration", 2*time.Second, "measure each point this long")
	fs.DurationVar(&f.warmup, "warmup", 500*time.Millisecond, "run each point this long before measuring")
	fs.DurationVar(&f.stuck, "stuck", services.DefaultStuck, "fail a point when a call has no reply this long after the warm-up or the window")
	fs.IntVar(&f.size, "size", 100, "request payload bytes (the reply carries it back)")
	fs.IntVar(&f.rounds, "rounds", 1, "measure each point this many times (transports interleaved); the table shows medians")
	fs.IntVar(&f.procs, "procs", 0, "GOMAXPROCS of both processes (0: Go's default, one per CPU)")
	fs.StringVar(&f.host, "host", "127.0.0.1", "IP the server listens on (tcp and rsock)")
	fs.BoolVar(&f.netns, "netns", false, "run client and server in two network namespaces joined through a router namespace")
	fs.IntVar(&f.mtu, "mtu", 1500, "MTU of the -netns lab's veths")
	fs.StringVar(&f.jsonPath, "json", "", "write one JSON record per point to this file (- for stdout)")
	fs.DurationVar(&f.timeout, "timeout", 15*time.Second, "give up waiting for the server child after this long")
	fs.BoolVar(&f.verbose, "v", false, "print each point as it starts, on stderr")
	fs.BoolVar(&f.serve, "serve", false, "internal: be the server child")
	fs.StringVar(&f.serverNetns, "server-netns", "", "internal: start the server child in this network namespace")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), servicesUsage)
		fs.VisitAll(func(fl *flag.Flag) {
			if strings.HasPrefix(fl.Usage, "internal:") {
				return
			}
			name, usage := flag.UnquoteUsage(fl)
			if name != "" {
				name = " " + name
			}
			fmt.Fprintf(fs.Output(), "  -%s%s\n    \t%s", fl.Name, name, usage)
			if fl.DefValue != "" && fl.DefValue != "false" && fl.DefValue != "0" {
				fmt.Fprintf(fs.Output(), " (default %s)", fl.DefValue)
			}
			fmt.Fprintln(fs.Output())
		})
	}
	return fs
}

// servicesPlan is the parsed sweep.
type servicesPlan struct {
	svcs    []services.Service
	trs     []services.Transport
	callers []int
}

// parse checks the flags and returns the sweep.
func (f *servicesFlags) parse() (*servicesPlan, error) {
	p := &servicesPlan{}
	for _, name := range strings.Split(f.services, ",") {
		s, err := services.ByName(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("-services: %v", err)
		}
		p.svcs = append(p.svcs, s)
	}
	seen := map[string]bool{}
	for _, name := range strings.Split(f.transports, ",") {
		t, err := services.ParseTransport(name)
		if err != nil {
			return nil, fmt.Errorf("-transports: %v", err)
		}
		if seen[t.Name] {
			return nil, fmt.Errorf("-transports: %q twice", t.Name)
		}
		seen[t.Name] = true
		if t.Kind == services.KindUnix && (f.netns || f.serverNetns != "") {
			return nil, errors.New("-transports unix: Unix sockets do not join two hosts (-netns)")
		}
		p.trs = append(p.trs, t)
	}
	for _, c := range strings.Split(f.callers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(c))
		if err != nil || n < 1 || n > 4096 {
			return nil, fmt.Errorf("-callers: %q is not a count in 1..4096", c)
		}
		p.callers = append(p.callers, n)
	}
	switch {
	case f.duration <= 0:
		return nil, fmt.Errorf("-duration %v must be positive", f.duration)
	case f.warmup < 0:
		return nil, fmt.Errorf("-warmup %v is negative", f.warmup)
	case f.stuck <= 0:
		return nil, fmt.Errorf("-stuck %v must be positive", f.stuck)
	case f.size < services.MinSize || f.size > services.MaxSize:
		return nil, fmt.Errorf("-size %d not in [%d, %d]", f.size, services.MinSize, services.MaxSize)
	case f.rounds < 1 || f.rounds > 100:
		return nil, fmt.Errorf("-rounds %d not in [1, 100]", f.rounds)
	case f.procs < 0:
		return nil, fmt.Errorf("-procs %d is negative", f.procs)
	case f.mtu < 1280 || f.mtu > 65535:
		return nil, fmt.Errorf("-mtu %d not in [1280, 65535]", f.mtu)
	}
	if _, err := netip.ParseAddr(f.host); err != nil {
		return nil, fmt.Errorf("-host %q: want an IP address", f.host)
	}
	return p, nil
}

// runServices is "rsockbench services".
func runServices(args []string, stdout, stderr io.Writer) int {
	var f servicesFlags
	fs := newServicesFlagSet(&f, stderr)
	if ok, code := parseStreamFlags(fs, args, stderr); !ok {
		return code
	}
	p, err := f.parse()
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench services: %v\n", err)
		return exitUsage
	}
	if f.procs > 0 {
		runtime.GOMAXPROCS(f.procs)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	switch {
	case f.serve:
		err = serveServices(ctx, p.trs, p.svcs, f.host, os.Stdin, stdout)
	case f.netns:
		err = servicesInLab(ctx, &f, args, stdout, stderr)
	default:
		err = servicesClient(ctx, &f, p, stdout, stderr)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench services: %v\n", err)
		return exitFail
	}
	return exitOK
}

// servicesInLab makes the router lab, runs this command again (without
// -netns) as the client inside the client namespace, with the server in
// the server namespace, and removes the lab.
func servicesInLab(ctx context.Context, f *servicesFlags, args []string, stdout, stderr io.Writer) (err error) {
	lab, err := newRouterLab(f.mtu)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, lab.close()) }()
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	var inner []string
	for _, a := range args {
		if a != "-netns" && a != "--netns" && a != "-netns=true" && a != "--netns=true" {
			inner = append(inner, a)
		}
	}
	inner = append([]string{"netns", "exec", lab.client, exe, "services"}, inner...)
	inner = append(inner, "-server-netns", lab.server, "-host", labServerIP)
	cmd := exec.Command("ip", inner...)
	cmd.Stdout, cmd.Stderr, cmd.Stdin = stdout, stderr, nil
	cmd.SysProcAttr = childSysProcAttr()
	if err := cmd.Start(); err != nil {
		return err
	}
	stopKill := context.AfterFunc(ctx, func() { cmd.Process.Kill() }) // by its PID
	defer stopKill()
	if err := cmd.Wait(); err != nil {
		return fmt.Errorf("the client in namespace %s: %w", lab.client, err)
	}
	return nil
}

// servicesClient starts the server child and measures every point.
func servicesClient(ctx context.Context, f *servicesFlags, p *servicesPlan, stdout, stderr io.Writer) (err error) {
	defer netconn.CloseIdleDevices()
	args := []string{"services", "-serve", "-host", f.host, "-transports", f.transports, "-services", f.services}
	var env []string
	if f.procs > 0 {
		env = append(env, "GOMAXPROCS="+strconv.Itoa(f.procs))
	}
	child, err := startSvcChild(ctx, f.serverNetns, args, env, stderr, f.timeout)
	if err != nil {
		return err
	}
	defer func() { err = child.finish(err) }()
	if f.verbose {
		fmt.Fprintf(stderr, "server child: pid %d\n", child.ready.PID)
	}
	if f.procs > 0 && child.ready.Procs != f.procs {
		return fmt.Errorf("the server child runs with GOMAXPROCS %d, not -procs %d", child.ready.Procs, f.procs)
	}
	path := "loopback " + f.host
	if f.serverNetns != "" {
		path = fmt.Sprintf("two namespaces through a router namespace, MTU %d", f.mtu)
	}
	fmt.Fprintf(stdout, "services: %s; GOMAXPROCS %d in the client, %d in the server; %d CPUs (%s)\n",
		path, runtime.GOMAXPROCS(0), child.ready.Procs, runtime.NumCPU(), cpuModel())
	fmt.Fprintf(stdout, "%d B requests; each point %v of warm-up, then %v measured\n", f.size, f.warmup, f.duration)
	for _, svc := range p.svcs {
		fmt.Fprintf(stdout, "  %s: %s\n", svc.Name(), svc.Describe())
	}
	fmt.Fprintln(stdout)

	var recs []*services.Record
	point := 0
	for _, svc := range p.svcs {
		for _, n := range p.callers {
			for round := range f.rounds {
				// Transports run back to back, in the given order and
				// then reversed at the next round or point, so that
				// drift favours none.
				trs := slices.Clone(p.trs)
				if point%2 == 1 {
					slices.Reverse(trs)
				}
				point++
				byName := map[string]*services.Record{}
				for _, tr := range trs {
					if f.verbose {
						fmt.Fprintf(stderr, "%s, %d callers, %s, round %d\n", svc.Name(), n, tr.Name, round)
					}
					rec, err := servicesPoint(ctx, f, child, svc, tr, n, stderr)
					if err != nil {
						return err
					}
					rec.Path, rec.Round = path, round
					byName[tr.Name] = rec
				}
				for _, tr := range p.trs {
					recs = append(recs, byName[tr.Name])
				}
			}
		}
	}
	order := recs
	services.SetRatios(order)
	if err := services.WriteTable(stdout, order); err != nil {
		return err
	}
	if f.jsonPath == "-" {
		err = services.WriteJSON(stdout, order)
	} else if f.jsonPath != "" {
		err = writeFile(f.jsonPath, func(w io.Writer) error { return services.WriteJSON(w, order) })
	}
	if err != nil {
		return fmt.Errorf("-json: %w", err)
	}
	var failed []string
	for _, r := range order {
		if r.Error != "" {
			failed = append(failed, fmt.Sprintf("%s %s x%d", r.Service, r.Transport, r.Callers))
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d points failed: %s", len(failed), strings.Join(failed, ", "))
	}
	return nil
}

// servicesPoint measures one service over one transport with n callers.
// A failed call makes a record with its error; only a failure of the
// harness (the server child) is an error.
func servicesPoint(ctx context.Context, f *servicesFlags, child *svcChild, svc services.Service, tr services.Transport, n int, stderr io.Writer) (*services.Record, error) {
	key := svcKey(tr.Name, svc.Name())
	rec := &services.Record{Service: svc.Name(), Transport: tr.Name, Callers: n, Size: f.size,
		ClientProcs: runtime.GOMAXPROCS(0), ServerProcs: child.ready.Procs}
	tally := &services.Tally{}
	client, err := svc.NewClient(services.ClientConfig{Addr: child.ready.Addrs[key],
		Dial: services.CountingDial(tr.Dialer(), tally), Callers: n, Size: f.size})
	if err != nil {
		return nil, err
	}
	before, err := child.stats(ctx)
	if err != nil {
		client.Close()
		return nil, err
	}
	var c0, c1 time.Duration
	var s0, s1 svcStats
	var markErr error
	load := services.Load{Callers: n, Warmup: f.warmup, Duration: f.duration, Stuck: f.stuck, Mark: func(start bool) {
		c := proccpu.Total()
		s, err := child.stats(ctx)
		if markErr == nil {
			markErr = err
		}
		if start {
			c0, s0 = c, s
		} else {
			c1, s1 = c, s
		}
	}}
	res, runErr := services.RunLoad(ctx, client, load)
	cerr := client.Close()
	after, err := child.stats(ctx)
	if err == nil {
		err = markErr
	}
	if err != nil {
		return nil, err
	}
	settleStart := time.Now()
	err = child.settle(ctx, key, f.stuck)
	if f.verbose {
		fmt.Fprintf(stderr, "  %.0f req/s; every caller had its first reply after %v; the server's connections closed and idle devices released in %v\n",
			res.ReqPerSec(), res.FirstReplies.Round(time.Millisecond), time.Since(settleStart).Round(time.Millisecond))
	}
	if err != nil {
		// A server connection that outlives its client is worth a
		// warning, not the run.
		if child.exitedNow() {
			return nil, err
		}
		fmt.Fprintf(stderr, "warning: %v\n", err)
	}
	rec.SetResult(res)
	if runErr = errors.Join(runErr, cerr); runErr != nil {
		rec.Error = runErr.Error()
	}
	if res.Requests > 0 {
		rec.ClientCPUus = float64(c1-c0) / 1e3 / float64(res.Requests)
		rec.ServerCPUus = float64(s1.CPU-s0.CPU) / 1e3 / float64(res.Requests)
	}
	var reasons map[string]int
	rec.ClientConns, reasons = tally.Counts()
	rec.ServerConns = diffCounts(after.Conns[key], before.Conns[key])
	rec.Fallbacks = diffCounts(after.Reasons[key], before.Reasons[key])
	for r, k := range reasons {
		rec.Fallbacks["client: "+r] += k
	}
	if len(rec.Fallbacks) == 0 {
		rec.Fallbacks = nil
	}
	if rec.ClientConns == nil {
		rec.ClientConns = map[string]int{}
	}
	return rec, ctx.Err()
}

// cpuModel is the first "model name" of /proc/cpuinfo, or "CPU unknown".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.TrimSpace(v)
			}
		}
	}
	return "CPU unknown"
}
