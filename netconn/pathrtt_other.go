//go:build !linux

package netconn

import (
	"net"
	"time"
)

// pathRTT is 0 where the kernel's TCP_INFO is not read.
func pathRTT(net.Conn) time.Duration { return 0 }
