//go:build !unix

package proccpu

import "time"

// Times returns zero: this platform has no getrusage.
func Times() (user, sys time.Duration) { return 0, 0 }
