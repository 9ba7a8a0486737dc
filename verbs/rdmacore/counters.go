//go:build rdmacore

package rdmacore

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/rsock-go/rsock/verbs"
)

// sysfsRoot is where the kernel lists RDMA devices.
const sysfsRoot = "/sys/class/infiniband"

// readCounters reads port 1's hw_counters of a device (rxe names them
// after the IBTA events; drivers without them read as zeros).
func readCounters(dev string) verbs.Counters {
	dir := filepath.Join(sysfsRoot, dev, "ports", "1", "hw_counters")
	get := func(name string) uint64 {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return 0
		}
		v, _ := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
		return v
	}
	return verbs.Counters{
		SentPackets:      get("sent_pkts"),
		RecvPackets:      get("rcvd_pkts"),
		Retransmits:      get("completer_retry_err"),
		SeqNAKsSent:      get("out_of_seq_request"),
		SeqNAKsRecv:      get("rcvd_seq_err"),
		RNRNAKsSent:      get("send_rnr_err"),
		RNRNAKsRecv:      get("rcvd_rnr_err"),
		Duplicates:       get("duplicate_request"),
		RetryExceeded:    get("retry_exceeded_err"),
		RNRRetryExceeded: get("retry_rnr_exceeded_err"),
		ICRCErrors:       get("rdma_rcv_icrc_errors"),
		SendErrors:       get("send_err"),
	}
}
