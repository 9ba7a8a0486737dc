// Command rsockbench benchmarks rsock.
//
// Usage:
//
//	rsockbench <subcommand> [flags]
//
// Each subcommand is a benchmark mode with its own flags (see
// 'rsockbench <subcommand> -h'):
//
//	local   rsock against TCP on loopback: a server child process and
//	        the client, stream throughput, ping-pong latency, CPU per GB
//	server  the server side of local, for runs across hosts
//	client  the client side of local, against a server
//	services
//	        real services (gRPC, Redis, net/http) over rsock and TCP, two
//	        processes, 1 and 32 callers, on loopback or across a router
//	stat    a running server's connections and devices (server -debug-addr)
//	verbs   RDMA verbs tests over soft-RoCE or rdma-core, shaped like perftest's
//	        ib_write_bw, ib_write_lat, ib_send_bw and ib_read_bw
//	rc-pingpong
//	        a peer of rdma-core's ibv_rc_pingpong, wire- and CLI-compatible
//	ib_send_bw, ib_write_bw, ib_read_bw, ib_write_lat
//	        peers of perftest's programs, wire- and CLI-compatible
//
// Exit status: 0 on success, 1 when a benchmark fails, 2 on a usage error.
package main

import (
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// run dispatches to a subcommand. Adding a mode takes one case here, one
// line in usageText and one file holding its run function.
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usageText)
		return exitUsage
	}
	switch cmd, rest := args[0], args[1:]; cmd {
	case "local":
		return runLocal(rest, stdout, stderr)
	case "server":
		return runServer(rest, stdout, stderr)
	case "client":
		return runClient(rest, stdout, stderr)
	case "services":
		return runServices(rest, stdout, stderr)
	case "stat":
		return runStat(rest, stdout, stderr)
	case "verbs":
		return runVerbs(rest, stdout, stderr)
	case "rc-pingpong":
		return runRCPingpong(rest, stdout, stderr)
	case "ib_send_bw", "ib_write_bw", "ib_read_bw", "ib_write_lat":
		return runPerftest(cmd, rest, stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usageText)
		return exitOK
	default:
		fmt.Fprintf(stderr, "rsockbench: unknown subcommand %q\n\n%s", cmd, usageText)
		return exitUsage
	}
}

const usageText = `usage: rsockbench <subcommand> [flags]

Subcommands:
  local    rsock against TCP on loopback: throughput, latency and CPU per GB, side by side
  server   serve local's measurements to clients on other hosts (-verify checks every byte)
  client   run local's measurements against a server (-verify -bytes N moves N checked bytes)
  services real services (gRPC, a Redis server and client, net/http), two processes: req/s and latency, rsock against TCP
  stat     print a running server's connections and devices, as ss -ti and rdma statistic (server -debug-addr)
  verbs    RDMA verbs tests over soft-RoCE or rdma-core (perftest-style write_bw, write_lat, send_bw, read_bw)
  rc-pingpong  ibv_rc_pingpong-compatible SEND ping-pong over soft-RoCE (client with a host, else server)
  ib_send_bw, ib_write_bw, ib_read_bw, ib_write_lat
           perftest-compatible tests over soft-RoCE, against perftest's own programs (client with a host, else server)

Run 'rsockbench <subcommand> -h' for the flags of a subcommand.
`
