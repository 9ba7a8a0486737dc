// Command netlab holds the programs of rsock's namespace path tests and
// path benchmark (package internal/netlab): each runs inside a lab's
// network namespace, started with ip netns exec, and speaks in JSON lines
// on stdout (netlab.Event).
//
// Usage:
//
//	netlab exchange -listen ADDR | -dial ADDR [-link udp] [-bytes N] [-seed S] [-rate B/s] [-progress N] [-stall D]
//	netlab relay -a IF -b IF [-duplicate F] [-reorder F] [-reorder-depth N] [-reorder-hold D] [-seed S]
//	netlab goodput -rsockbench PATH [-mtus 9000,1500] [-loss 0,0.1,1,5,20] [-directions one,both] [-families ipv4] [-bytes 256MiB | -duration D] [-case-timeout D] [-total-timeout D] [-prefix P]
//
// exchange moves -bytes each way at once over one netconn connection
// (netconn.Listen / netconn.Dial), each direction a seeded pseudo-random
// stream, and prints the SHA-256 of what it sent and of what it received,
// the connection's transport and the process's RDMA counters. relay is the
// impairment relay of the lab's middle namespace: it runs until SIGTERM,
// then prints its counts. goodput runs in the host namespace: it makes a
// lab per case and prints the markdown table of rsock against TCP under
// loss (scripts/netpath-bench.sh runs it).
//
// Exit status: 0 on success, 1 on a failure, 2 on a usage error.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rsock-go/rsock/internal/netlab"
	"github.com/rsock-go/rsock/internal/streambench"
	"github.com/rsock-go/rsock/netconn"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usage = `usage: netlab exchange|relay|goodput [flags]; netlab <command> -h for its flags
`

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "exchange":
		return runExchange(args[1:], stdout, stderr)
	case "relay":
		return runRelay(args[1:], stdout, stderr)
	case "goodput":
		return runGoodput(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "netlab: unknown command %q\n%s", args[0], usage)
		return 2
	}
}

// events writes netlab.Events as JSON lines; safe for concurrent use.
type events struct {
	mu sync.Mutex
	w  io.Writer
}

func (e *events) emit(ev netlab.Event) {
	b, err := json.Marshal(ev)
	if err != nil {
		panic(err) // an Event always marshals
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.w.Write(append(b, '\n'))
}

// parse parses a command's flags; ok false means exit with code.
func parse(fs *flag.FlagSet, args []string) (ok bool, code int) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return false, 0
		}
		return false, 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(fs.Output(), "netlab %s: unexpected argument %q\n", fs.Name(), fs.Arg(0))
		return false, 2
	}
	return true, 0
}

// runExchange is "netlab exchange": one side of a two-way netconn stream.
func runExchange(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("exchange", flag.ContinueOnError)
	fs.SetOutput(stderr)
	listen := fs.String("listen", "", "listen on this address (netconn.Listen) and serve one connection")
	dial := fs.String("dial", "", "dial this address (netconn.Dial)")
	linkName := fs.String("link", netconn.LinkUDP, "netconn link (the path tests run soft-RoCE over the kernel's UDP; auto runs TCP between hosts without an RNIC)")
	size := fs.String("bytes", "16MiB", "bytes to send (and to receive) each way")
	seed := fs.Uint64("seed", 1, "seed of the pseudo-random streams")
	rate := fs.Int64("rate", 0, "cap the sending rate at this many bytes per second (0: none)")
	progress := fs.Int64("progress", 0, "print a progress event each time this many more bytes have been received (0: none)")
	stall := fs.Duration("stall", netlab.DefaultStall, "fail when no byte moves for this long (0: the default)")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	n, err := streambench.ParseSize(*size)
	if err != nil || n < 0 {
		fmt.Fprintf(stderr, "netlab exchange: -bytes %q: want a byte count\n", *size)
		return 2
	}
	if (*listen == "") == (*dial == "") {
		fmt.Fprintln(stderr, "netlab exchange: give one of -listen and -dial")
		return 2
	}
	ev := &events{w: stdout}
	cfg := netlab.ExchangeConfig{Bytes: n, Seed: *seed, Listener: *listen != "", Rate: *rate, Stall: *stall}
	if *progress > 0 {
		cfg.ProgressEvery = *progress
		cfg.Progress = func(received int64) { ev.emit(netlab.Event{Event: netlab.EventProgress, Received: received}) }
	}
	res := exchange(*listen, *dial, *linkName, cfg, ev)
	ev.emit(netlab.Event{Event: netlab.EventResult, Result: res})
	if res.Error != "" {
		fmt.Fprintf(stderr, "netlab exchange: %s\n", res.Error)
		return 1
	}
	return 0
}

// exchangeAcceptTimeout bounds the listener's wait for its dialer.
const exchangeAcceptTimeout = time.Minute

// exchange connects (listening or dialing), runs netlab.Exchange, and
// fills in the transport and the counters.
func exchange(listen, dial, linkName string, cfg netlab.ExchangeConfig, ev *events) *netlab.ExchangeResult {
	var c net.Conn
	if listen != "" {
		lc := netconn.ListenConfig{Link: linkName}
		ln, err := lc.Listen(context.Background(), "tcp", listen)
		if err != nil {
			return &netlab.ExchangeResult{MismatchAt: -1, Error: err.Error()}
		}
		ev.emit(netlab.Event{Event: netlab.EventListening, Addr: ln.Addr().String()})
		timer := time.AfterFunc(exchangeAcceptTimeout, func() { ln.Close() })
		c, err = ln.Accept()
		timer.Stop()
		ln.Close()
		if err != nil {
			return &netlab.ExchangeResult{MismatchAt: -1, Error: fmt.Sprintf("accept: %v", err)}
		}
	} else {
		d := netconn.Dialer{Dialer: net.Dialer{Timeout: 30 * time.Second}, Link: linkName}
		var err error
		if c, err = d.DialContext(context.Background(), "tcp", dial); err != nil {
			return &netlab.ExchangeResult{MismatchAt: -1, Error: err.Error()}
		}
	}
	defer c.Close()
	res := netlab.Exchange(c, cfg)
	if nc, ok := c.(*netconn.Conn); ok {
		res.Transport, res.FallbackReason = nc.Transport(), nc.FallbackReason()
	} else {
		res.Transport = fmt.Sprintf("%T", c)
	}
	res.Counters = netconn.Counters()
	return res
}

// runRelay is "netlab relay": the impairment relay, until SIGTERM.
func runRelay(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("relay", flag.ContinueOnError)
	fs.SetOutput(stderr)
	a := fs.String("a", "", "the interface toward A")
	b := fs.String("b", "", "the interface toward B")
	var imp netlab.Impairment
	fs.Float64Var(&imp.Duplicate, "duplicate", 0, "fraction of frames sent twice")
	fs.Float64Var(&imp.Reorder, "reorder", 0, "fraction of frames held back and sent after later ones")
	fs.IntVar(&imp.ReorderDepth, "reorder-depth", 0, "later frames that pass a held frame (0: 3)")
	fs.DurationVar(&imp.ReorderHold, "reorder-hold", 0, "longest hold of a frame (0: 2ms)")
	fs.Uint64Var(&imp.Seed, "seed", 1, "seed of the random choices")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if *a == "" || *b == "" {
		fmt.Fprintln(stderr, "netlab relay: give -a and -b")
		return 2
	}
	r, err := netlab.OpenRelay(*a, *b, imp)
	if err != nil {
		fmt.Fprintf(stderr, "netlab relay: %v\n", err)
		return 1
	}
	defer r.Close()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	defer signal.Stop(sigs)
	go func() {
		<-sigs
		r.Stop()
	}()
	ev := &events{w: stdout}
	ev.emit(netlab.Event{Event: netlab.EventReady})
	err = r.Run()
	rep := r.Report()
	ev.emit(netlab.Event{Event: netlab.EventRelay, Relay: &rep})
	if err != nil {
		fmt.Fprintf(stderr, "netlab relay: %v\n", err)
		return 1
	}
	return 0
}

// runGoodput is "netlab goodput": the loss table.
func runGoodput(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("goodput", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg netlab.GoodputConfig
	fs.StringVar(&cfg.Rsockbench, "rsockbench", "", "path of the rsockbench binary (required)")
	mtus := fs.String("mtus", "9000,1500", "MTUs, comma-separated")
	losses := fs.String("loss", "0,0.1,1,5,20", "loss percentages, comma-separated")
	directions := fs.String("directions", "one,both", "loss directions: one (at the receiver), both")
	families := fs.String("families", "ipv4", "address families: ipv4, ipv6")
	size := fs.String("bytes", "256MiB", "bytes each transport moves per row (0: run for -duration)")
	fs.DurationVar(&cfg.Duration, "duration", 10*time.Second, "how long each transport runs per row, with -bytes 0")
	fs.DurationVar(&cfg.Timeout, "case-timeout", 2*time.Minute, "end a transport's run that takes longer, and report it as a timeout")
	total := fs.Duration("total-timeout", time.Hour, "start no further row after this long (they are reported as not run)")
	fs.StringVar(&cfg.Prefix, "prefix", "netlab-bench", "start of the lab namespaces' names")
	jsonPath := fs.String("json", "", "also write the rows as JSON lines to this file")
	if ok, code := parse(fs, args); !ok {
		return code
	}
	if cfg.Rsockbench == "" {
		fmt.Fprintln(stderr, "netlab goodput: -rsockbench is required")
		return 2
	}
	n, err := streambench.ParseSize(*size)
	if err != nil || n < 0 {
		fmt.Fprintf(stderr, "netlab goodput: -bytes %q: want a byte count\n", *size)
		return 2
	}
	cfg.Bytes = n
	cases, err := goodputCases(*mtus, *losses, *directions, *families)
	if err != nil {
		fmt.Fprintf(stderr, "netlab goodput: %v\n", err)
		return 2
	}
	if err := netlab.Check(); err != nil {
		fmt.Fprintf(stderr, "netlab goodput: %v\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	deadline := time.Now().Add(*total)
	var rows []netlab.GoodputRow
	for i, c := range cases {
		if ctx.Err() != nil || time.Now().After(deadline) {
			why := "not run: -total-timeout reached"
			if ctx.Err() != nil {
				why = "not run: interrupted"
			}
			rows = append(rows, netlab.GoodputRow{Case: c, Err: why})
			continue
		}
		start := time.Now()
		fmt.Fprintf(stderr, "[%d/%d] %v ...", i+1, len(cases), c)
		row := netlab.MeasureGoodput(ctx, cfg, c)
		fmt.Fprintf(stderr, " tcp %s, rsock %s (%.0fs)\n", state(&row.TCP), state(&row.Rsock), time.Since(start).Seconds())
		if row.Err != "" {
			fmt.Fprintf(stderr, "    %s\n", row.Err)
		}
		rows = append(rows, row)
	}
	if err := netlab.WriteGoodputTable(stdout, rows); err != nil {
		fmt.Fprintf(stderr, "netlab goodput: %v\n", err)
		return 1
	}
	if *jsonPath != "" {
		if err := writeRows(*jsonPath, rows); err != nil {
			fmt.Fprintf(stderr, "netlab goodput: -json: %v\n", err)
			return 1
		}
	}
	if ctx.Err() != nil {
		return 1
	}
	return 0
}

// state summarizes a run for the progress lines.
func state(r *netlab.TransportRun) string {
	switch {
	case r.TimedOut:
		return "timeout"
	case r.Err != "":
		return "failed"
	}
	return netlab.FormatGBps(r.GBps) + " GB/s"
}

// goodputCases is the cross product of the lists, MTU outermost.
func goodputCases(mtus, losses, directions, families string) ([]netlab.GoodputCase, error) {
	var cases []netlab.GoodputCase
	for _, m := range strings.Split(mtus, ",") {
		mtu, err := strconv.Atoi(strings.TrimSpace(m))
		if err != nil || mtu < 1280 || mtu > 65535 {
			return nil, fmt.Errorf("-mtus: %q is not an MTU in [1280, 65535]", m)
		}
		for _, l := range strings.Split(losses, ",") {
			pm, err := netlab.ParseLoss(l)
			if err != nil {
				return nil, fmt.Errorf("-loss: %v", err)
			}
			for _, d := range strings.Split(directions, ",") {
				d = strings.TrimSpace(d)
				if d != "one" && d != "both" {
					return nil, fmt.Errorf("-directions: %q is not one or both", d)
				}
				if pm == 0 && d == "both" && strings.Contains(directions, "one") {
					continue // no loss is the same both ways: one row
				}
				for _, f := range strings.Split(families, ",") {
					f = strings.TrimSpace(f)
					if f != "ipv4" && f != "ipv6" {
						return nil, fmt.Errorf("-families: %q is not ipv4 or ipv6", f)
					}
					cases = append(cases, netlab.GoodputCase{MTU: mtu, LossPerMille: pm, BothWays: d == "both", IPv6: f == "ipv6"})
				}
			}
		}
	}
	return cases, nil
}

// writeRows writes rows as JSON lines.
func writeRows(path string, rows []netlab.GoodputRow) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(f)
	for _, r := range rows {
		if err := enc.Encode(r); err != nil {
			f.Close()
			return err
		}
	}
	return f.Close()
}
