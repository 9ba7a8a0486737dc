//go:build rdmacore

package rdmacore

// The C side lives in shim.h, included by every file that calls it.

// #cgo LDFLAGS: -libverbs
import "C"

import "sync/atomic"

// cgoCalls counts the data path's cgo calls (posts, polls, completion
// events and re-arms) of every device in the process; the tests read it
// to count the crossings a message costs.
var cgoCalls atomic.Uint64
