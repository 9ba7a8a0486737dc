//go:build dpdk

package dpdk

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain holds the process's DPDK environment across the tests (it
// starts only once per process), and checks that releasing it removes
// the runtime directory.
func TestMain(m *testing.M) {
	os.Setenv(EnvArgs, "--no-huge -m 512 --no-pci --no-telemetry --log-level=lib.eal:warning")
	release, err := Hold()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	dir := env.dir
	code := m.Run()
	release()
	if _, err := os.Stat(dir); err == nil {
		fmt.Fprintf(os.Stderr, "runtime directory %s left behind\n", dir)
		code = 1
	}
	if err := goleak.Find(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		code = 1
	}
	os.Exit(code)
}
