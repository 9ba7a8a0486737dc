//go:build linux

package shm

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if role := os.Getenv(childEnv); role != "" {
		runChild(role)
		return
	}
	goleak.VerifyTestMain(m)
}
