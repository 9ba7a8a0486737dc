package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// routerLab is two hosts made of network namespaces, client and server,
// each joined by a veth pair to a router namespace that forwards between
// them: two subnets, one hop, every veth at one MTU. Offloads stay as the
// kernel sets them for veths (TSO, GSO and GRO on), as on hosts with
// ordinary NICs. Only addresses inside its own namespaces are used.
type routerLab struct {
	client, router, server string // namespace names
	made                   []string
}

// Addresses of the router lab.
const (
	labClientIP    = "10.78.1.2"
	labRouterToC   = "10.78.1.1"
	labRouterToS   = "10.78.2.1"
	labServerIP    = "10.78.2.2"
	labNamePrefix  = "rsvc-"
	labToolTimeout = 30 * time.Second
)

// newRouterLab makes the lab; on error it removes what it made. Its
// namespaces are named rsvc-<random>-{c,r,s}: after a killed run,
// `ip netns list | grep ^rsvc-` finds what is left.
func newRouterLab(mtu int) (_ *routerLab, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("-netns needs root, to create network namespaces")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("-netns needs ip (iproute2): %w", err)
	}
	var suffix [4]byte
	rand.Read(suffix[:])
	base := labNamePrefix + hex.EncodeToString(suffix[:])
	l := &routerLab{client: base + "-c", router: base + "-r", server: base + "-s"}
	defer func() {
		if err != nil {
			l.close()
		}
	}()
	for _, ns := range []string{l.client, l.router, l.server} {
		if err := labRun("ip", "netns", "add", ns); err != nil {
			return nil, err
		}
		l.made = append(l.made, ns)
		if err := labRun("ip", "-n", ns, "link", "set", "lo", "up"); err != nil {
			return nil, err
		}
	}
	m := strconv.Itoa(mtu)
	steps := [][]string{
		{"ip", "-n", l.client, "link", "add", "eth0", "mtu", m, "type", "veth", "peer", "name", "toc", "mtu", m, "netns", l.router},
		{"ip", "-n", l.server, "link", "add", "eth0", "mtu", m, "type", "veth", "peer", "name", "tos", "mtu", m, "netns", l.router},
		{"ip", "-n", l.client, "addr", "add", labClientIP + "/24", "dev", "eth0"},
		{"ip", "-n", l.server, "addr", "add", labServerIP + "/24", "dev", "eth0"},
		{"ip", "-n", l.router, "addr", "add", labRouterToC + "/24", "dev", "toc"},
		{"ip", "-n", l.router, "addr", "add", labRouterToS + "/24", "dev", "tos"},
		{"ip", "-n", l.client, "link", "set", "eth0", "up"},
		{"ip", "-n", l.server, "link", "set", "eth0", "up"},
		{"ip", "-n", l.router, "link", "set", "toc", "up"},
		{"ip", "-n", l.router, "link", "set", "tos", "up"},
		{"ip", "-n", l.client, "route", "add", "default", "via", labRouterToC},
		{"ip", "-n", l.server, "route", "add", "default", "via", labRouterToS},
		{"ip", "netns", "exec", l.router, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if err := labRun(s...); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// close deletes the lab's namespaces, which takes their veths with them.
func (l *routerLab) close() error {
	var first error
	for i := len(l.made) - 1; i >= 0; i-- {
		if err := labRun("ip", "netns", "del", l.made[i]); err != nil && first == nil {
			first = err
		}
	}
	l.made = nil
	return first
}

// labRun runs a tool and returns an error that includes its output.
func labRun(args ...string) error {
	ctx, cancel := context.WithTimeout(context.Background(), labToolTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}
