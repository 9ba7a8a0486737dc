package services

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"github.com/rsock-go/rsock/netconn"
)

// Transport kinds.
const (
	KindTCP   = "tcp"   // plain net TCP
	KindUnix  = "unix"  // the kernel's Unix stream sockets
	KindRsock = "rsock" // netconn
)

// Transport is one way to carry the services' connections, parsed from a
// name such as "tcp", "unix", "rsock" (netconn with the library's
// defaults: its provider and link settings, RSOCK_PROVIDER and
// RSOCK_LINK), "rsock:udp" (link udp) or "rsock:softroce/udp" (provider
// and link; "rsock:rdmacore/" names the provider only).
type Transport struct {
	// Name is the name it was parsed from.
	Name string
	// Kind is KindTCP, KindUnix or KindRsock.
	Kind string
	// Provider and Link are netconn's settings for KindRsock; empty means
	// the library's default.
	Provider, Link string
}

// ParseTransport parses a transport's name.
func ParseTransport(name string) (Transport, error) {
	name = strings.TrimSpace(name)
	t := Transport{Name: name}
	kind, spec, hasSpec := strings.Cut(name, ":")
	switch kind {
	case KindTCP, KindUnix:
		if hasSpec {
			return Transport{}, fmt.Errorf("transport %q: %s takes no settings", name, kind)
		}
		t.Kind = kind
		return t, nil
	case KindRsock:
		t.Kind = kind
	default:
		return Transport{}, fmt.Errorf("unknown transport %q (want tcp, unix, rsock, rsock:LINK or rsock:PROVIDER/LINK)", name)
	}
	if !hasSpec {
		return t, nil
	}
	if p, l, ok := strings.Cut(spec, "/"); ok {
		t.Provider, t.Link = p, l
	} else {
		t.Link = spec
	}
	if (t.Provider == "" && t.Link == "") || !token(t.Provider) || !token(t.Link) {
		return Transport{}, fmt.Errorf("transport %q: want rsock:LINK, rsock:PROVIDER/LINK or rsock:PROVIDER/", name)
	}
	return t, nil
}

// token reports whether s is empty or a setting's name: letters, digits,
// '-' and '_'.
func token(s string) bool {
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// Listen opens a listener for one service: on host (an IP address, port
// chosen by the kernel) for tcp and rsock, and as the socket file
// dir/service.sock for unix.
func (t Transport) Listen(ctx context.Context, host, dir, service string) (net.Listener, error) {
	switch t.Kind {
	case KindTCP:
		var lc net.ListenConfig
		return lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	case KindUnix:
		var lc net.ListenConfig
		return lc.Listen(ctx, "unix", filepath.Join(dir, service+".sock"))
	case KindRsock:
		lc := netconn.ListenConfig{Provider: t.Provider, Link: t.Link}
		return lc.Listen(ctx, "tcp", net.JoinHostPort(host, "0"))
	}
	return nil, fmt.Errorf("transport %q: not parsed", t.Name)
}

// DialFunc opens a connection to a service's address.
type DialFunc func(ctx context.Context, addr string) (net.Conn, error)

// Dialer returns the function that dials the transport's listeners.
func (t Transport) Dialer() DialFunc {
	switch t.Kind {
	case KindUnix:
		var d net.Dialer
		return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "unix", addr) }
	case KindRsock:
		d := &netconn.Dialer{Provider: t.Provider, Link: t.Link}
		return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
	}
	var d net.Dialer
	return func(ctx context.Context, addr string) (net.Conn, error) { return d.DialContext(ctx, "tcp", addr) }
}
