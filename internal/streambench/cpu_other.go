//go:build !unix

package streambench

import "time"

// cpuTimes returns zero: this platform has no getrusage.
func cpuTimes() (user, sys time.Duration) { return 0, 0 }
