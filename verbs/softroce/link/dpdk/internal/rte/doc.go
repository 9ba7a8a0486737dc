// Package rte is a thin cgo binding of the parts of DPDK 22.11 that the
// dpdk link calls: EAL init and cleanup, mbuf pools, ethdev configure,
// queue setup, start, stop and close, rx and tx bursts, MAC address, link
// status, rx interrupts, virtual device hot-plug and net_ring pairs. It
// is built with the build tag dpdk only.
//
// A burst is one cgo call. Packet memory is DPDK's (outside the Go heap),
// and Go reads and writes it in place through the addresses a burst
// returns.
package rte
