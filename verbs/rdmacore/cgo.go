//go:build rdmacore

package rdmacore

// The C side lives in shim.h, included by every file that calls it.

// #cgo LDFLAGS: -libverbs
import "C"
