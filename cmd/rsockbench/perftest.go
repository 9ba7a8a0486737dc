package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rsock-go/rsock/internal/perftest"
	"github.com/rsock-go/rsock/verbs"
)

const perftestUsage = `usage:
  rsockbench %[1]s [flags]          start a server and wait for a connection
  rsockbench %[1]s [flags] <host>   connect to the server at <host>

A soft-RoCE stand-in for perftest's %[1]s, compatible on the wire and on
the command line: the same TCP exchange (port 18515: versions, cycle buffer
and cache line sizes, MTU, 108-byte queue pair and memory key messages,
the same handshakes, bandwidth reports, "done"), then the test over one RC
queue pair. It runs against perftest 5.70 and later (it announces %[2]s).
Flags may follow the host, as with getopt. -d, -i, -x, -F and -c RC are
accepted and ignored: the device has one port and one GID, its -roce IP.

Flags:
`

func runPerftest(name string, args []string, stdout, stderr io.Writer) int {
	test, _ := perftest.ParseTest(name)
	var (
		port, size, iters, mtu, txDepth, rxDepth, cqMod, outReads, qpTimeout, qps, ibPort, gidIdx, peerPort int
		cpuFreq, verbose                                                                                    bool
		dev, conn, roce                                                                                     string
		timeout, linger                                                                                     time.Duration
	)
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), perftestUsage, name, perftest.Version)
		fs.PrintDefaults()
	}
	intFlag(fs, &port, "p", "port", perftest.DefaultTCPPort, "listen on / connect to TCP `port`")
	defaults := perftest.Config{Test: test}.WithDefaults()
	intFlag(fs, &size, "s", "size", defaults.Size, "message size in `bytes`")
	intFlag(fs, &iters, "n", "iters", defaults.Iters, "`number` of messages (bandwidth tests) or exchanges (latency)")
	intFlag(fs, &mtu, "m", "mtu", 4096, "path MTU in `bytes` (256..4096); the smaller of both sides' is used")
	intFlag(fs, &txDepth, "t", "tx-depth", 0, "requests in flight (default 128 for bandwidth tests)")
	intFlag(fs, &rxDepth, "r", "rx-depth", 0, "receives an ib_send_bw server keeps posted (default 512)")
	intFlag(fs, &cqMod, "Q", "cq-mod", 0, "signal every `n`-th request (default 100; 1 above 8 KiB)")
	intFlag(fs, &outReads, "o", "outs", 0, "READs accepted in flight as responder (default 16 for ib_read_bw)")
	intFlag(fs, &qpTimeout, "u", "qp-timeout", perftest.DefaultQPTimeout, "local ACK timeout `code`: 4.096 µs × 2^code (1..31)")
	intFlag(fs, &qps, "q", "qp", 1, "queue pairs (must be 1)")
	intFlag(fs, &ibPort, "i", "ib-port", 1, "`port` of the device (must be 1)")
	intFlag(fs, &gidIdx, "x", "gid-index", -1, "GID `index` (accepted; the device has one GID)")
	fs.BoolVar(&cpuFreq, "F", false, "accepted and ignored (perftest's CPU frequency warning)")
	fs.BoolVar(&cpuFreq, "CPU-freq", false, "same as -F")
	fs.StringVar(&dev, "d", "", "device `name` (accepted and ignored)")
	fs.StringVar(&dev, "ib-dev", "", "same as -d")
	fs.StringVar(&conn, "c", "RC", "connection `type` (RC only)")
	fs.StringVar(&conn, "connection", "RC", "same as -c")
	fs.StringVar(&roce, "roce", "", "local `IP:PORT` of the soft-RoCE UDP link (default: the IP that routes to the peer, port 4791)")
	fs.IntVar(&peerPort, "peer-roce-port", 0, "UDP `port` of the peer's RoCE link, when it is another soft-RoCE that could not bind 4791 (default 4791)")
	fs.DurationVar(&timeout, "timeout", perftest.DefaultTimeout, "bound on each TCP exchange and on any stretch without progress")
	fs.DurationVar(&linger, "linger", perftest.DefaultLinger, "keep the QP open this long after the test, to acknowledge the peer's last requests")
	fs.BoolVar(&verbose, "v", false, "print the device counters at the end")
	pos, code, ok := parsePermuted(fs, args)
	if !ok {
		return code
	}
	usage := func(format string, a ...any) int {
		fmt.Fprintf(stderr, name+": "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case size < 1 || iters < 1:
		return usage("size %d and iterations %d must be positive", size, iters)
	case len(pos) > 1:
		return usage("more than one host: %q", pos)
	case qps != 1:
		return usage("%d queue pairs: only 1 is supported", qps)
	case ibPort != 1:
		return usage("ib port %d: the device has port 1 only", ibPort)
	case conn != "RC":
		return usage("connection type %q: only RC is supported", conn)
	case qpTimeout < 1 || qpTimeout > 31:
		return usage("QP timeout %d out of range 1..31", qpTimeout)
	case port < 1 || port > 65535:
		return usage("bad port %d", port)
	case peerPort < 0 || peerPort > 65535:
		return usage("bad peer RoCE port %d", peerPort)
	}
	m := verbs.MTUFromBytes(mtu)
	if m.Bytes() != mtu {
		return usage("MTU %d: want 256, 512, 1024, 2048 or 4096", mtu)
	}
	cfg := perftest.Config{Test: test, Size: size, Iters: iters, MTU: m, TxDepth: txDepth, RxDepth: rxDepth,
		CQMod: cqMod, OutReads: outReads, QPTimeout: uint8(qpTimeout), PeerRoCEPort: uint16(peerPort), Timeout: timeout, Linger: linger, Log: stdout}
	if linger == 0 {
		cfg.Linger = -1
	}
	if roce != "" {
		ap, err := parseRoCE(roce)
		if err != nil {
			return usage("-roce: %v", err)
		}
		cfg.RoCE = ap
	}
	if err := cfg.Check(); err != nil {
		return usage("%v", err)
	}
	host := ""
	if len(pos) == 1 {
		host = pos[0]
	} else {
		fmt.Fprintf(stdout, "\n************************************\n* Waiting for client to connect... *\n************************************\n")
	}
	return runExchange(name, host, port, timeout, stderr, func(ctx context.Context, conn net.Conn) error {
		run := perftest.Server
		if host != "" {
			run = perftest.Client
		}
		res, err := run(ctx, conn, cfg)
		if res != nil && verbose {
			fmt.Fprintf(stderr, "counters: %+v\n", res.Counters)
		}
		return err
	})
}
