//go:build rdmacore

package main

// Built with -tags rdmacore, rsockbench carries the rdma-core provider:
// -provider rdmacore (or auto on a host with an RDMA device) runs its
// rsock side on a real device through libibverbs.
import _ "github.com/rsock-go/rsock/verbs/rdmacore"
