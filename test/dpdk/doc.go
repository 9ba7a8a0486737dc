// Package dpdk tests the dpdk link between processes: two processes
// joined by a net_memif pair carry a netconn stream over soft-RoCE. The
// tests need the build tag dpdk (DPDK 22.11 installed), no hugepages and
// no NIC.
package dpdk
