// Package memif tests the memif link against an independent peer: DPDK's
// net_memif in dpdk-testpmd, forwarding between two memif server ports,
// with one of our links connected to each as a memif client. testpmd.sh
// starts testpmd and runs the tests; without it they skip.
package memif
