//go:build linux

package timerfd

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package's tests if goroutines are left running.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
