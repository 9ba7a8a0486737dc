package main

import "syscall"

// childSysProcAttr makes the server child die with its parent, so that a
// killed -local run leaves nothing behind.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
