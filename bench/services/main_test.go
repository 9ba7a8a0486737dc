package services

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/rsock-go/rsock/netconn"
)

// TestMain checks for leaked goroutines after closing the rsock devices
// the tests left idle (netconn keeps a device open a few seconds after
// its last connection, for the next one). A device whose last
// connection closed only just now may still be open: its receive loop,
// fine clock and linger timer are not leaks.
func TestMain(m *testing.M) {
	code := m.Run()
	netconn.CloseIdleDevices()
	if code == 0 {
		if err := goleak.Find(
			goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*receiver).loop"),
			goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce.(*fineClock).run"),
			goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/verbs/softroce/internal/timerfd.(*Timer).wait"),
			goleak.IgnoreAnyFunction("github.com/rsock-go/rsock/netconn.releaseDevice.func1"),
		); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: %v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
