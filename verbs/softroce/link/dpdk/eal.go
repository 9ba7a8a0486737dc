//go:build dpdk

package dpdk

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk/internal/rte"
)

// The process's EAL: initialised on the first Open (or Hold), cleaned up
// when the last port closes and the last Hold is released. DPDK cannot
// initialise it again in the same process.
var env struct {
	sync.Mutex
	refs    int
	started bool
	ended   bool
	dir     string
	pools   int // names the mbuf pools
}

// ErrEnded reports an Open after the process's DPDK environment was
// cleaned up: DPDK initialises it only once per process.
var ErrEnded = errors.New("dpdk: the DPDK environment of this process was cleaned up (after its last port closed) and cannot start again")

// acquire takes a reference on the EAL, initialising it from $RSOCK_DPDK_ARGS
// the first time. The caller holds env.
func acquireLocked() error {
	if env.ended {
		return ErrEnded
	}
	if !env.started {
		args := EALArgs(os.Getenv(EnvArgs), os.Getpid())
		if err := rte.Init(args); err != nil {
			return fmt.Errorf("dpdk: EAL init with %q: %w", args, err)
		}
		env.started = true
		env.dir = rte.RuntimeDir()
	}
	env.refs++
	return nil
}

// releaseLocked drops a reference; the last one cleans the EAL up and
// removes its runtime directory. The caller holds env.
func releaseLocked() {
	env.refs--
	if env.refs > 0 {
		return
	}
	env.ended = true
	rte.Cleanup()
	if env.dir != "" {
		os.RemoveAll(env.dir)
	}
}

// Hold keeps the process's DPDK environment alive (initialising it if
// needed) until release is called, so that ports may close and open again
// in between: tests and long-lived programs hold it, and release it at
// exit.
func Hold() (release func(), err error) {
	env.Lock()
	defer env.Unlock()
	if err := acquireLocked(); err != nil {
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			env.Lock()
			releaseLocked()
			env.Unlock()
		})
	}, nil
}
