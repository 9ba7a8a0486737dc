//go:build dpdk

package main

// The dpdk link registers itself with this import.
import _ "github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
