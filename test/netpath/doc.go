// Package netpath tests rsock over real network paths: network namespaces
// joined by veth pairs (package internal/netlab), at MTU 1500 and 9000,
// over IPv4 and IPv6, with random loss, duplication, reordering and
// outages. It has tests only; they need root (they skip, saying why,
// without it) and the ip, nft and ethtool tools.
//
// The default run keeps to a few minutes: 256 MiB each way on the clean
// paths, 4 to 32 MiB on the impaired ones. -netpath.soak runs every case at
// 256 MiB on every MTU and address family:
//
//	go test ./test/netpath/ -v -netpath.soak -timeout 2h
//
// Speed is never asserted here: scripts/netpath-bench.sh measures it.
// What fails a test is a wrong or missing byte, a connection that did not
// use RDMA, or a transfer that hangs (no progress for 30 s, or no end
// within a generous limit).
package netpath
