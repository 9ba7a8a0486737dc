package services

import (
	"context"
	"fmt"
	"net"
	"strings"
)

// Service is one real service: a server that serves a listener, and a
// client that calls it from many goroutines at once.
type Service interface {
	// Name is the service's name: grpc, redis or http.
	Name() string
	// Describe says what a call is, for tables.
	Describe() string
	// Serve serves ln in the background until stop, which closes ln and
	// the connections it accepted, and returns once serving ended.
	Serve(ln net.Listener) (stop func() error, err error)
	// NewClient makes a client of the server at cfg.Addr.
	NewClient(cfg ClientConfig) (Client, error)
}

// ClientConfig configures a service's client.
type ClientConfig struct {
	// Addr is the server's address: host:port, or a Unix socket's path.
	Addr string
	// Dial opens the client's connections.
	Dial DialFunc
	// Callers is how many goroutines call at once; the client keeps as
	// many connections as its library would for them (gRPC: one).
	Callers int
	// Size is each request's payload in bytes, at least MinSize.
	Size int
}

func (cfg ClientConfig) check() error {
	if cfg.Callers < 1 {
		return fmt.Errorf("services: %d callers", cfg.Callers)
	}
	if cfg.Size < MinSize || cfg.Size > MaxSize {
		return fmt.Errorf("services: payload size %d not in [%d, %d]", cfg.Size, MinSize, MaxSize)
	}
	if cfg.Dial == nil {
		return fmt.Errorf("services: no dial function")
	}
	return nil
}

// scratch holds a caller's request payload and the reply it expects, so
// that a call allocates no payloads of its own. Each caller uses only its
// own.
type scratch struct{ req, want []byte }

func newScratch(cfg ClientConfig) []scratch {
	s := make([]scratch, cfg.Callers)
	for i := range s {
		s[i] = scratch{req: make([]byte, cfg.Size), want: make([]byte, cfg.Size)}
	}
	return s
}

// Client calls a service.
type Client interface {
	// Call makes call seq of caller (in [0, Callers)) and checks its
	// reply. Callers call concurrently; each numbers its calls 0, 1, 2, ...
	Call(ctx context.Context, caller int, seq uint64) error
	// Close closes the client's connections.
	Close() error
}

// All lists the services, in the order tables show them.
var All = []Service{GRPC{}, Redis{}, HTTP{}}

// ByName finds a service by its name.
func ByName(name string) (Service, error) {
	var names []string
	for _, s := range All {
		if s.Name() == name {
			return s, nil
		}
		names = append(names, s.Name())
	}
	return nil, fmt.Errorf("unknown service %q (want %s)", name, strings.Join(names, ", "))
}
