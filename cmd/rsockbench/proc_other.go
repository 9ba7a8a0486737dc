//go:build !linux

package main

import "syscall"

// childSysProcAttr returns nil: only Linux can tie a child's life to its
// parent's.
func childSysProcAttr() *syscall.SysProcAttr { return nil }
