package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs"
)

const statUsage = `usage: rsockbench stat -addr HOST:PORT [-json]

Fetches the rsock snapshot of a running process from its expvar endpoint
(http://ADDR/debug/vars, as 'rsockbench server -debug-addr ADDR' serves it)
and prints one line per connection, as 'ss -ti' does, then one per device,
as 'rdma statistic' does, then the process's fallbacks by kind.

Flags:
`

// runStat is the stat subcommand.
func runStat(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("stat", flag.ContinueOnError)
	fs.SetOutput(stderr)
	addr := fs.String("addr", "", "the debug address of the process (server -debug-addr)")
	asJSON := fs.Bool("json", false, "print the snapshot as JSON instead")
	timeout := fs.Duration("timeout", 5*time.Second, "give up the fetch after this long")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), statUsage)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if *addr == "" || fs.NArg() > 0 {
		fmt.Fprintf(stderr, "rsockbench stat: -addr is required, and nothing else\n")
		return exitUsage
	}
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()
	st, err := fetchState(ctx, *addr)
	if err != nil {
		fmt.Fprintf(stderr, "rsockbench stat: %v\n", err)
		return exitFail
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(st); err != nil {
			fmt.Fprintf(stderr, "rsockbench stat: %v\n", err)
			return exitFail
		}
		return exitOK
	}
	printState(stdout, st)
	return exitOK
}

// fetchState reads the "rsock" variable of http://addr/debug/vars.
func fetchState(ctx context.Context, addr string) (netconn.State, error) {
	var st netconn.State
	url := "http://" + addr + "/debug/vars"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return st, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("%s: %s", url, resp.Status)
	}
	var vars map[string]json.RawMessage
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&vars); err != nil {
		return st, fmt.Errorf("%s: %w", url, err)
	}
	raw, ok := vars[netconn.ExpvarName]
	if !ok {
		return st, fmt.Errorf("%s has no %q variable: not an rsock process", url, netconn.ExpvarName)
	}
	if err := json.Unmarshal(raw, &st); err != nil {
		return st, fmt.Errorf("%s: %q: %w", url, netconn.ExpvarName, err)
	}
	return st, nil
}

// printState prints st: connections as ss -ti, devices as rdma statistic.
func printState(w io.Writer, st netconn.State) {
	tw := tabwriter.NewWriter(w, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "Netid\tLocal Address:Port\tPeer Address:Port\tTransport\tDetails")
	for _, d := range st.Devices {
		for _, c := range d.Conns {
			fmt.Fprintf(tw, "rdma\t%v\t%v\t%s\t%s\n", c.Local, c.Remote, c.Transport, rdmaDetails(c))
		}
	}
	for _, c := range st.TCPConns {
		fmt.Fprintf(tw, "tcp\t%v\t%v\t%s\t%s\n", c.Local, c.Remote, c.Transport, tcpDetails(c))
	}
	tw.Flush()
	for _, d := range st.Devices {
		fmt.Fprintf(w, "link %s/1 provider %s link %s conns %d registered_bytes %d %s\n",
			d.Name, d.Provider, d.Link, len(d.Conns), d.RegisteredBytes, counterFields(d.Counters))
	}
	var kinds []string
	for _, k := range netconn.FallbackKinds {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, st.Fallbacks[k]))
	}
	fmt.Fprintf(w, "fallbacks: %s; pending handshakes %d; handshake failures %d; connection errors %d; registered bytes %d\n",
		strings.Join(kinds, ", "), st.PendingHandshakes, st.HandshakeFailures, st.ConnErrors, st.RegisteredBytes)
}

// rdmaDetails is an RDMA conn's line after its addresses, in ss -ti's
// key:value style.
func rdmaDetails(c netconn.ConnStats) string {
	var b strings.Builder
	fmt.Fprintf(&b, "dev:%s qpn:%d dqpn:%d mtu:%d rtt:%s/%s cwnd:%d inflight:%d",
		c.Device, c.QPN, c.DestQPN, c.PathMTU, ms(c.SRTT), ms(c.RTTVar), c.Cwnd, c.Inflight)
	if c.PacketMTU > 0 {
		fmt.Fprintf(&b, " packet_mtu:%d", c.PacketMTU)
	}
	if c.PacingRate > 0 {
		fmt.Fprintf(&b, " pacing_rate:%dbps", c.PacingRate*8) // bits, as ss prints it
	}
	if c.CongestionEvents > 0 {
		fmt.Fprintf(&b, " cong_events:%d", c.CongestionEvents)
	}
	if c.HostDelay > 0 {
		fmt.Fprintf(&b, " host_delay:%s", ms(c.HostDelay))
	}
	if c.ECNCERecv+c.ECNEchoesSent+c.ECNEchoesRecv+c.ECNMarksEchoed > 0 {
		fmt.Fprintf(&b, " ecn_ce_recv:%d ecn_echoes_sent:%d ecn_echoes_recv:%d ecn_marks_echoed:%d",
			c.ECNCERecv, c.ECNEchoesSent, c.ECNEchoesRecv, c.ECNMarksEchoed)
	}
	if c.Reordering > 0 {
		fmt.Fprintf(&b, " reordering:%d spurious:%d", c.Reordering, c.SpuriousResends)
	}
	if c.DupEchoesRecv > 0 {
		fmt.Fprintf(&b, " dup_echoes_recv:%d cong_undos:%d spurious_timeouts:%d", c.DupEchoesRecv, c.CongestionUndos, c.SpuriousTimeouts)
	}
	fmt.Fprintf(&b, " bytes_sent:%d bytes_received:%d retrans:%d timeouts:%d naks_sent:%d naks_recv:%d rnr_sent:%d rnr_recv:%d credit_stalls:%d sendring_stalls:%d",
		c.BytesWritten, c.BytesRead, c.Retransmits, c.Timeouts, c.SeqNAKsSent, c.SeqNAKsRecv,
		c.RNRNAKsSent, c.RNRNAKsRecv, c.CreditStalls, c.SendRingStalls)
	if c.FallbackReason != "" {
		fmt.Fprintf(&b, " reason:%s", strconv.Quote(c.FallbackReason))
	}
	return b.String()
}

// tcpDetails is a TCP conn's line after its addresses.
func tcpDetails(c netconn.ConnStats) string {
	s := fmt.Sprintf("bytes_sent:%d bytes_received:%d", c.BytesWritten, c.BytesRead)
	if c.FallbackReason != "" {
		return s + " reason:" + strconv.Quote(c.FallbackReason)
	}
	return s + " (plain)"
}

// ms formats a duration in milliseconds, as ss does.
func ms(d time.Duration) string {
	return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64)
}

// counterFields are a device's counters as rdma statistic names them
// (rxe's hw_counters where it has one).
func counterFields(c verbs.Counters) string {
	return fmt.Sprintf("sent_pkts %d rcvd_pkts %d retransmits %d timeouts %d out_of_seq_request %d rcvd_seq_err %d "+
		"send_rnr_err %d rcvd_rnr_err %d icrc_errors %d icrc_unverified %d duplicate_request %d access_errors %d "+
		"malformed %d unknown_qp %d wrong_peer %d retry_exceeded_err %d retry_rnr_exceeded_err %d completion_queue_overrun %d "+
		"send_errors %d out_of_order %d unexpected_responses %d out_of_sequence %d congestion_events %d "+
		"ecn_capable_recv %d ecn_ce_recv %d ecn_echoes_sent %d ecn_echoes_recv %d ecn_marks_echoed %d "+
		"dup_echoes_sent %d dup_echoes_recv %d congestion_undos %d spurious_timeouts %d",
		c.SentPackets, c.RecvPackets, c.Retransmits, c.Timeouts, c.SeqNAKsSent, c.SeqNAKsRecv,
		c.RNRNAKsSent, c.RNRNAKsRecv, c.ICRCErrors, c.ICRCUnverified, c.Duplicates, c.AccessErrors,
		c.Malformed, c.UnknownQP, c.WrongPeer, c.RetryExceeded, c.RNRRetryExceeded, c.CQOverruns,
		c.SendErrors, c.OutOfOrder, c.UnexpectedResponses, c.OutOfSequence, c.CongestionEvents,
		c.ECNCapableRecv, c.ECNCERecv, c.ECNEchoesSent, c.ECNEchoesRecv, c.ECNMarksEchoed,
		c.DupEchoesSent, c.DupEchoesRecv, c.CongestionUndos, c.SpuriousTimeouts)
}
