// Package netns runs code inside a named network namespace (one that
// `ip netns add` made), so that tests can open sockets there.
package netns

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Do runs fn on an OS thread switched into the network namespace name
// (/run/netns/name), then switches the thread back, also when fn ends
// the goroutine (t.Fatal). Sockets fn creates stay in that namespace. If
// switching back fails, the thread stays locked and ends with the
// goroutine, and the error says so.
func Do(name string, fn func()) (err error) {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + name)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("netns: setns %s: %w", name, err)
	}
	defer func() {
		if serr := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); serr != nil {
			err = errors.Join(errors.New("netns: setns back"), serr)
			return
		}
		runtime.UnlockOSThread()
	}()
	fn()
	return nil
}
