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
	"strings"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/internal/verbsbench"
	"github.com/rsock-go/rsock/verbs"
)

const verbsUsage = `usage:
  rsockbench verbs -server [-addr 127.0.0.1:18515] [-roce 127.0.0.1:0] [-provider P] [-persist]
  rsockbench verbs [-addr 127.0.0.1:18515] [-roce 127.0.0.1:0] [-provider P] -test write_bw [flags]
  rsockbench verbs -local [-provider P] -test write_bw [flags]

Runs perftest-style RDMA tests between two verbs devices. With -provider
softroce (the default) each side is a soft-RoCE device on its own UDP socket
at -roce. With -provider rdmacore (a binary built with -tags rdmacore) each
side opens the RDMA device that has a RoCEv2 GID for -roce's IP (its port is
ignored), e.g. rxe0 or a ConnectX port. The client connects to the server's
TCP control address, they exchange queue pair parameters, run the test and the
server reports its side. -local starts the server as a child process (control
on loopback, its device on the -roce IP, port 0) and runs the client.

-test takes a comma-separated list of write_bw, write_lat, send_bw, read_bw,
or all. Bandwidth rates are decimal (1 GB/s = 10^9 B/s); latencies are
one-way (half the round trip), as ib_write_lat reports them.

Flags:
`

// verbsServerPrefix starts the line a server prints once it listens.
const verbsServerPrefix = "verbs server listening on "

// verbsFlags holds the flags of the verbs subcommand.
type verbsFlags struct {
	server, local, persist, verbose bool
	addr, roce, tests, jsonPath     string
	provider                        string
	size, mtu, txDepth, rxDepth     int
	cqMod, outs                     int
	iters                           uint64
	duration, timeout, wait         time.Duration
}

func runVerbs(args []string, stdout, stderr io.Writer) int {
	var f verbsFlags
	fs := flag.NewFlagSet("verbs", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), verbsUsage)
		fs.PrintDefaults()
	}
	fs.BoolVar(&f.server, "server", false, "run the server side")
	fs.BoolVar(&f.local, "local", false, "start a server child process on loopback and run the client against it")
	fs.BoolVar(&f.persist, "persist", false, "server: keep accepting clients instead of exiting after the first")
	fs.BoolVar(&f.verbose, "v", false, "-local: show the server child's output on stderr")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:18515", "TCP control address: the server listens on it, the client connects to it")
	fs.StringVar(&f.roce, "roce", verbsbench.DefaultRoCEAddr, "local IP:port of the soft-RoCE UDP socket (port 0: 4791 if free, else ephemeral)")
	fs.StringVar(&f.provider, "provider", verbsbench.ProviderSoftRoCE, "verbs provider: softroce, or a registered one (rdmacore with -tags rdmacore)")
	fs.StringVar(&f.tests, "test", "write_bw", "tests to run: write_bw, write_lat, send_bw, read_bw, comma-separated, or all")
	fs.IntVar(&f.size, "size", verbsbench.DefaultSize, "message size in bytes")
	fs.IntVar(&f.mtu, "mtu", verbsbench.DefaultMTU, "path MTU in bytes: 256, 512, 1024, 2048 or 4096")
	fs.Uint64Var(&f.iters, "iters", 0, fmt.Sprintf("iterations (default %d for bandwidth, %d for latency tests)", verbsbench.DefaultBWIters, verbsbench.DefaultLatIters))
	fs.DurationVar(&f.duration, "duration", 0, "run each test for this long instead of a number of iterations")
	fs.IntVar(&f.txDepth, "tx-depth", verbsbench.DefaultTxDepth, "sends kept in flight by bandwidth tests")
	fs.IntVar(&f.rxDepth, "rx-depth", verbsbench.DefaultRxDepth, "receives kept posted (send_bw server, write_lat)")
	fs.IntVar(&f.cqMod, "cq-mod", verbsbench.DefaultCQMod, "signal every this many sends")
	fs.IntVar(&f.outs, "outs", verbsbench.DefaultOuts, "RDMA READs in flight (read_bw)")
	fs.StringVar(&f.jsonPath, "json", "", "write one JSON record per test to this file (- for stdout)")
	fs.DurationVar(&f.timeout, "timeout", verbsbench.DefaultTimeout, "give up after this long without progress (handshake, or no packet from the peer)")
	fs.DurationVar(&f.wait, "wait", 0, "server: give up if no client connects within this long (0: wait forever)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rsockbench verbs: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	if f.server && f.local {
		fmt.Fprintln(stderr, "rsockbench verbs: -server and -local exclude each other")
		return exitUsage
	}
	roce, err := netip.ParseAddrPort(f.roce)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench verbs: -roce %q: want IP:port: %v\n", f.roce, err)
		return exitUsage
	}

	if _, ok := verbs.LookupProvider(f.provider); !ok && f.provider != verbsbench.ProviderSoftRoCE {
		fmt.Fprintf(stderr, "rsockbench verbs: -provider %q is not built into this binary (it has %s)\n",
			f.provider, strings.Join(append([]string{verbsbench.ProviderSoftRoCE}, verbs.Providers()...), ", "))
		return exitUsage
	}
	var cfgs []verbsbench.Config
	if !f.server {
		if cfgs, err = f.configs(roce); err != nil {
			fmt.Fprintf(stderr, "rsockbench verbs: %v\n", err)
			return exitUsage
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if f.server {
		if err := verbsServe(ctx, &f, roce, stdout); err != nil {
			fmt.Fprintf(stderr, "rsockbench verbs server: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	if f.local {
		err = verbsLocal(ctx, &f, cfgs, stdout, stderr)
	} else {
		err = verbsClient(ctx, &f, f.addr, cfgs, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench verbs: %v\n", err)
		return exitFail
	}
	return exitOK
}

// configs turns the flags into one checked Config per test.
func (f *verbsFlags) configs(roce netip.AddrPort) ([]verbsbench.Config, error) {
	names := strings.Split(f.tests, ",")
	if f.tests == "all" {
		names = nil
		for _, t := range verbsbench.Tests {
			names = append(names, t.String())
		}
	}
	if f.iters != 0 && f.duration != 0 {
		return nil, errors.New("give -iters or -duration, not both")
	}
	if f.iters > verbsbench.MaxIters {
		return nil, fmt.Errorf("-iters %d exceeds %d", f.iters, uint64(verbsbench.MaxIters))
	}
	if f.duration < 0 {
		return nil, fmt.Errorf("-duration %v is negative", f.duration)
	}
	var cfgs []verbsbench.Config
	for _, name := range names {
		t, err := verbsbench.ParseTest(strings.TrimSpace(name))
		if err != nil {
			return nil, fmt.Errorf("-test: %v", err)
		}
		c := verbsbench.Config{Test: t, Size: f.size, MTU: f.mtu, Iters: f.iters, Duration: f.duration,
			TxDepth: f.txDepth, RxDepth: f.rxDepth, CQMod: min(f.cqMod, f.txDepth), Outs: f.outs,
			Provider: f.provider, RoCE: roce, Timeout: f.timeout}
		if f.size <= 0 || f.mtu <= 0 || f.txDepth <= 0 || f.rxDepth <= 0 || f.cqMod <= 0 || f.outs <= 0 {
			return nil, errors.New("-size, -mtu, -tx-depth, -rx-depth, -cq-mod and -outs must be positive")
		}
		if err := c.Check(); err != nil {
			return nil, err
		}
		cfgs = append(cfgs, c)
	}
	return cfgs, nil
}

// verbsServe listens on f.addr and serves one client (or, with -persist,
// one after another).
func verbsServe(ctx context.Context, f *verbsFlags, roce netip.AddrPort, stdout io.Writer) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", f.addr)
	if err != nil {
		return err
	}
	defer ln.Close()
	stopCtx := context.AfterFunc(ctx, func() { ln.Close() })
	defer stopCtx()
	fmt.Fprintf(stdout, "%s%s\n", verbsServerPrefix, ln.Addr())
	if f.wait > 0 {
		ln.(*net.TCPListener).SetDeadline(time.Now().Add(f.wait))
	}
	for {
		conn, err := ln.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("no client connected within %v", f.wait)
			}
			return err
		}
		fmt.Fprintf(stdout, "client %v connected\n", conn.RemoteAddr())
		err = verbsbench.Serve(ctx, conn, verbsbench.ServerConfig{Provider: f.provider, RoCE: roce, Timeout: f.timeout,
			OnTest: func(p verbsbench.Params, r verbsbench.Report, err error) {
				if err != nil {
					fmt.Fprintf(stdout, "%v size=%d: failed: %v\n", p.Test, p.Size, err)
					return
				}
				fmt.Fprintf(stdout, "%v size=%d: received %d messages, %d bytes; verified %d bytes; retransmits %d; cpu %.3fs user %.3fs sys\n",
					p.Test, p.Size, r.Msgs, r.Bytes, r.Verified, r.Retransmits, r.CPUUser.Seconds(), r.CPUSys.Seconds())
			}})
		conn.Close()
		if !f.persist {
			return err
		}
		if err != nil {
			fmt.Fprintf(stdout, "session failed: %v\n", err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}

// verbsClient connects to the server at addr, runs the tests and prints
// their results.
func verbsClient(ctx context.Context, f *verbsFlags, addr string, cfgs []verbsbench.Config, stdout io.Writer) error {
	var out io.Writer
	if f.jsonPath == "-" {
		out = stdout
	} else if f.jsonPath != "" {
		file, err := os.Create(f.jsonPath)
		if err != nil {
			return err
		}
		defer file.Close()
		out = file
	}
	d := net.Dialer{Timeout: f.timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("connect to server: %w", err)
	}
	defer conn.Close()
	for _, c := range cfgs {
		r, err := verbsbench.Run(ctx, conn, c)
		if err != nil {
			return fmt.Errorf("%v: %w", c.Test, err)
		}
		printVerbsResult(stdout, r)
		if out != nil {
			b, err := json.Marshal(r)
			if err != nil {
				return err
			}
			if _, err := out.Write(append(b, '\n')); err != nil {
				return fmt.Errorf("-json: %w", err)
			}
		}
	}
	if err := verbsbench.Bye(conn); err != nil {
		return fmt.Errorf("end session: %w", err)
	}
	return nil
}

func printVerbsResult(w io.Writer, r *verbsbench.Result) {
	r.WriteHeader(w)
	r.WriteRow(w)
	fmt.Fprintf(w, " retransmits %d, timeouts %d, RNR NAKs %d; verified %d bytes; CPU client %.3fs user %.3fs sys, server %.3fs user %.3fs sys\n",
		r.Retransmits, r.Timeouts, r.RNRNAKs, r.VerifiedBytes, r.CPUUser, r.CPUSys, r.ServerCPUUser, r.ServerCPUSys)
	fmt.Fprint(w, "---------------------------------------------------------------------------------------\n")
}

// verbsLocal starts "rsockbench verbs -server" as a child process on
// loopback, runs the client against it, and reaps the child.
func verbsLocal(ctx context.Context, f *verbsFlags, cfgs []verbsbench.Config, stdout, stderr io.Writer) (err error) {
	// The server's link binds the client's IP too, on port 0 (4791 if
	// free, else ephemeral), so that a fixed -roce port is not taken twice.
	roce, _ := netip.ParseAddrPort(f.roce)
	args := []string{"verbs", "-server", "-addr", "127.0.0.1:0", "-roce", netip.AddrPortFrom(roce.Addr(), 0).String(),
		"-provider", f.provider, "-timeout", f.timeout.String(), "-wait", "30s"}
	var rest io.Writer
	if f.verbose {
		rest = prefixWriter{w: stderr, prefix: "server: "}
	}
	child, err := startServerChild(args, rest, stderr)
	if err != nil {
		return err
	}
	defer func() { err = child.finish(err) }()
	line, err := child.firstLine(ctx, f.timeout)
	if err != nil {
		return err
	}
	addr, ok := strings.CutPrefix(line, verbsServerPrefix)
	if !ok {
		return fmt.Errorf("server child failed to start (first output %q)", line)
	}
	if f.verbose {
		fmt.Fprintf(stderr, "server: pid %d listening on %s\n", child.pid(), addr)
	}
	return verbsClient(ctx, f, addr, cfgs, stdout)
}

// prefixWriter writes each line it is given with a prefix.
type prefixWriter struct {
	w      io.Writer
	prefix string
}

func (p prefixWriter) Write(b []byte) (int, error) {
	if _, err := io.WriteString(p.w, p.prefix); err != nil {
		return 0, err
	}
	return p.w.Write(b)
}
