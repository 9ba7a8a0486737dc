//go:build !linux

package netconn

import "testing"

func shmChannelsLeft(*[]string) {}

func noShm(*testing.T) {}
