package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/rsock-go/rsock/internal/rcpingpong"
)

const rcPingpongUsage = `usage:
  rsockbench rc-pingpong [flags]          start a server and wait for a connection
  rsockbench rc-pingpong [flags] <host>   connect to the server at <host>

A soft-RoCE peer compatible with rdma-core's ibv_rc_pingpong, on the wire and
on the command line: the same TCP exchange of queue pair addresses (port
18515, 52-byte "LID:QPN:PSN:GID" messages, then "done"), then a ping-pong of
SEND messages over one RC queue pair, the client sending first. Flags may
follow the host, as with getopt. The device has one GID, its -roce IP: -g
is accepted with any index, and the peer must run ibv_rc_pingpong with -g
so that it sends a GID. -d and -i are accepted and ignored; -e is accepted
(completions are always waited for, not busy-polled).

Flags:
`

func runRCPingpong(args []string, stdout, stderr io.Writer) int {
	var (
		port, size, mtu, rxDepth, iters, gidIdx, ibPort, sl int
		events, verbose                                     bool
		dev, roce                                           string
		timeout, linger                                     time.Duration
	)
	fs := flag.NewFlagSet("rc-pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), rcPingpongUsage)
		fs.PrintDefaults()
	}
	intFlag(fs, &port, "p", "port", rcpingpong.DefaultTCPPort, "listen on / connect to TCP `port`")
	intFlag(fs, &size, "s", "size", rcpingpong.DefaultSize, "size of message to exchange, in `bytes`")
	intFlag(fs, &mtu, "m", "mtu", rcpingpong.DefaultMTU, "path MTU in `bytes` (256..4096)")
	intFlag(fs, &rxDepth, "r", "rx-depth", rcpingpong.DefaultRxDepth, "`number` of receives to post at a time")
	intFlag(fs, &iters, "n", "iters", rcpingpong.DefaultIters, "`number` of exchanges")
	intFlag(fs, &gidIdx, "g", "gid-idx", -1, "local port GID `index` (accepted; the device has one GID)")
	intFlag(fs, &ibPort, "i", "ib-port", 1, "`port` of the device (must be 1)")
	intFlag(fs, &sl, "l", "sl", 0, "service `level` (accepted, not used: RoCE has no SL on the wire)")
	fs.BoolVar(&events, "e", false, "sleep on CQ events (always the case here)")
	fs.BoolVar(&events, "events", false, "same as -e")
	fs.StringVar(&dev, "d", "", "device `name` (accepted and ignored)")
	fs.StringVar(&dev, "ib-dev", "", "same as -d")
	fs.StringVar(&roce, "roce", "", "local `IP:PORT` of the soft-RoCE UDP link (default: the IP that routes to the peer, port 4791)")
	fs.DurationVar(&timeout, "timeout", rcpingpong.DefaultTimeout, "bound on the exchange and on any stretch without a completion")
	fs.DurationVar(&linger, "linger", rcpingpong.DefaultLinger, "keep the QP open this long after the last completion, to acknowledge the peer's last message")
	fs.BoolVar(&verbose, "v", false, "print the device counters at the end")

	pos, code, ok := parsePermuted(fs, args)
	if !ok {
		return code
	}
	if len(pos) > 1 {
		fmt.Fprintf(stderr, "rc-pingpong: more than one host: %q\n", pos)
		return exitUsage
	}
	if ibPort != 1 {
		fmt.Fprintf(stderr, "rc-pingpong: ib port %d: the device has port 1 only\n", ibPort)
		return exitUsage
	}
	if port < 1 || port > 65535 {
		fmt.Fprintf(stderr, "rc-pingpong: bad port %d\n", port)
		return exitUsage
	}
	cfg := rcpingpong.Config{Size: size, Iters: iters, MTU: mtu, RxDepth: rxDepth, Timeout: timeout, Linger: linger, Log: stdout}
	if linger == 0 {
		cfg.Linger = -1
	}
	if roce != "" {
		ap, err := parseRoCE(roce)
		if err != nil {
			fmt.Fprintf(stderr, "rc-pingpong: -roce: %v\n", err)
			return exitUsage
		}
		cfg.RoCE = ap
	}
	if err := cfg.Check(); err != nil {
		fmt.Fprintf(stderr, "rc-pingpong: %v\n", err)
		return exitUsage
	}
	host := ""
	if len(pos) == 1 {
		host = pos[0]
	}
	return runExchange("rc-pingpong", host, port, timeout, stderr, func(ctx context.Context, conn net.Conn) error {
		run := rcpingpong.Server
		if host != "" {
			run = rcpingpong.Client
		}
		res, err := run(ctx, conn, cfg)
		if res != nil && verbose {
			fmt.Fprintf(stderr, "counters: %+v\n", res.Counters)
		}
		if err != nil {
			if res != nil {
				return fmt.Errorf("after %d sends, %d receives: %w", res.Sends, res.Recvs, err)
			}
			return err
		}
		fmt.Fprint(stdout, res.Summary())
		return nil
	})
}
