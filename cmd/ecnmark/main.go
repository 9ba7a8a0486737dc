//go:build linux

// Command ecnmark puts a CE-marking virtual queue (internal/ecnmark) at a
// device's egress and holds it there until it is sent SIGINT or SIGTERM;
// then it prints its counters as one JSON line and takes it off. It is the
// marking bottleneck of scripts/bottleneck-bench.sh (ECN=1), run in front
// of a tbf of the same rate:
//
//	ecnmark -netns NS -dev DEV -rate 100mbit -k 1ms -burst 65536 &
//
// It needs root and a kernel with tcx (6.6 or later).
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/cilium/ebpf/rlimit"

	"github.com/rsock-go/rsock/internal/ecnmark"
)

func main() {
	netns := flag.String("netns", "", "network namespace of the device (a name ip netns knows); empty: this process's")
	dev := flag.String("dev", "", "device whose egress is marked")
	rate := flag.String("rate", "", "the virtual queue's rate, as tc writes it (100mbit)")
	k := flag.Duration("k", time.Millisecond, "queueing delay above which ECT packets are marked CE")
	limit := flag.Duration("limit", 20*time.Millisecond, "the virtual queue's depth")
	burst := flag.Uint64("burst", 0, "the bucket of the token bucket behind the marker, in bytes (tbf's burst)")
	flag.Parse()
	if err := run(*netns, *dev, *rate, *k, *limit, *burst); err != nil {
		fmt.Fprintln(os.Stderr, "ecnmark:", err)
		os.Exit(1)
	}
}

func run(netns, dev, rateStr string, k, limit time.Duration, burst uint64) error {
	if dev == "" || rateStr == "" {
		return fmt.Errorf("-dev and -rate are required")
	}
	rate, err := ecnmark.ParseRate(rateStr)
	if err != nil {
		return err
	}
	if err := rlimit.RemoveMemlock(); err != nil {
		return err
	}
	m, err := ecnmark.New(ecnmark.Config{Rate: rate, Threshold: k, Limit: limit, Burst: burst})
	if err != nil {
		return err
	}
	defer m.Close()
	a, err := m.Attach(netns, dev)
	if err != nil {
		return err
	}
	defer a.Close()
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	fmt.Fprintf(os.Stderr, "ecnmark: marking on %s (netns %q) at %d bit/s, K %v, limit %v, burst %d B\n", dev, netns, rate, k, limit, burst)
	<-sig
	c, err := m.Counts()
	if err != nil {
		return err
	}
	return json.NewEncoder(os.Stdout).Encode(c)
}
