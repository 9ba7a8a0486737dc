//go:build !linux

package streambench

import (
	"errors"
	"syscall"
)

// tcpCongestionControl fails: TCP_CONGESTION is Linux's.
func tcpCongestionControl(name string) func(network, address string, c syscall.RawConn) error {
	return func(string, string, syscall.RawConn) error {
		return errors.New("streambench: choosing TCP's congestion control (" + name + ") needs Linux")
	}
}
