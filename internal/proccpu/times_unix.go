//go:build unix

package proccpu

import (
	"syscall"
	"time"
)

// Times returns the process's user and system CPU time so far (0, 0 if
// getrusage fails).
func Times() (user, sys time.Duration) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}
