//go:build dpdk

package main

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs/softroce/link/dpdk"
)

// localMTU is the MTU of the memif pair of "local": jumbo frames, which
// net_memif carries (RoCE MTU 4096).
const localMTU = "9000"

// With -tags dpdk, "-link dpdk" is available; "local" joins the two
// processes with a net_memif pair unless $RSOCK_DPDK_PORT is set: this
// process (which opens its device first, as it dials) is the memif
// server, the server child its client, on a socket in a fresh temporary
// directory, at 10.78.0.2 and 10.78.0.1.
func init() {
	localLinks[netconn.LinkDPDK] = func() (func(), error) {
		if os.Getenv(dpdk.EnvPort) != "" {
			return func() {}, nil
		}
		dir, err := os.MkdirTemp("", "rsockbench-dpdk-")
		if err != nil {
			return nil, err
		}
		var id [4]byte
		rand.Read(id[:])
		socket := filepath.Join(dir, "memif-"+hex.EncodeToString(id[:])+".sock")
		port := func(role string) string {
			return "net_memif0,role=" + role + ",socket=" + socket + ",socket-abstract=no"
		}
		os.Setenv(dpdk.EnvPort, port("server"))
		os.Setenv(dpdk.EnvIP, "10.78.0.2/24")
		os.Setenv(dpdk.EnvMTU, localMTU)
		childEnv = append(childEnv, dpdk.EnvPort+"="+port("client"), dpdk.EnvIP+"=10.78.0.1/24", dpdk.EnvMTU+"="+localMTU)
		return func() { os.RemoveAll(dir) }, nil
	}
}
