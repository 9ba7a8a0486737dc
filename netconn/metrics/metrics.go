// Package metrics serves rsock's process-wide state (netconn.Snapshot) in
// Prometheus' text exposition format (version 0.0.4), without the
// Prometheus client library: counters end in _total, every family has
// HELP and TYPE lines, and label values are escaped. JSONHandler serves
// the same state as JSON.
//
// Nothing is served by importing a package of rsock: the state names
// addresses and queue pairs, so mount these handlers on a mux that only
// operators reach.
//
//	mux.Handle("/metrics", metrics.Handler())
package metrics

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/rsock-go/rsock/netconn"
	"github.com/rsock-go/rsock/verbs"
)

// ContentType is the media type of the text format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler returns an http.Handler that serves netconn.Snapshot() as
// metrics.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		Write(w, netconn.Snapshot())
	})
}

// JSONHandler returns an http.Handler that serves netconn.Snapshot() as
// JSON (the shape of netconn.State).
func JSONHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		json.NewEncoder(w).Encode(netconn.Snapshot())
	})
}

// deviceCounters are the device counters exported, by metric name.
var deviceCounters = []struct {
	name, help string
	get        func(*verbs.Counters) uint64
}{
	{"rsock_device_sent_packets_total", "Packets the device handed to its link.", func(c *verbs.Counters) uint64 { return c.SentPackets }},
	{"rsock_device_received_packets_total", "Packets the device received from its link.", func(c *verbs.Counters) uint64 { return c.RecvPackets }},
	{"rsock_device_retransmits_total", "Request packets sent again.", func(c *verbs.Counters) uint64 { return c.Retransmits }},
	{"rsock_device_timeouts_total", "Local ACK timeouts.", func(c *verbs.Counters) uint64 { return c.Timeouts }},
	{"rsock_device_spurious_timeouts_total", "Local ACK timeouts whose acknowledgement proved late, not lost.", func(c *verbs.Counters) uint64 { return c.SpuriousTimeouts }},
	{"rsock_device_seq_naks_sent_total", "PSN sequence NAKs sent.", func(c *verbs.Counters) uint64 { return c.SeqNAKsSent }},
	{"rsock_device_seq_naks_received_total", "PSN sequence NAKs received.", func(c *verbs.Counters) uint64 { return c.SeqNAKsRecv }},
	{"rsock_device_rnr_naks_sent_total", "Receiver-not-ready NAKs sent.", func(c *verbs.Counters) uint64 { return c.RNRNAKsSent }},
	{"rsock_device_rnr_naks_received_total", "Receiver-not-ready NAKs received.", func(c *verbs.Counters) uint64 { return c.RNRNAKsRecv }},
	{"rsock_device_icrc_errors_total", "Packets dropped for a bad ICRC.", func(c *verbs.Counters) uint64 { return c.ICRCErrors }},
	{"rsock_device_icrc_unverified_total", "Packets accepted whose ICRC the link could not check.", func(c *verbs.Counters) uint64 { return c.ICRCUnverified }},
	{"rsock_device_duplicates_total", "Duplicate requests answered.", func(c *verbs.Counters) uint64 { return c.Duplicates }},
	{"rsock_device_access_errors_total", "Remote access NAKs sent.", func(c *verbs.Counters) uint64 { return c.AccessErrors }},
	{"rsock_device_malformed_total", "Packets that did not parse.", func(c *verbs.Counters) uint64 { return c.Malformed }},
	{"rsock_device_unknown_qp_total", "Packets for no queue pair, or for one not ready.", func(c *verbs.Counters) uint64 { return c.UnknownQP }},
	{"rsock_device_wrong_peer_total", "Packets from an address other than the queue pair's peer.", func(c *verbs.Counters) uint64 { return c.WrongPeer }},
	{"rsock_device_retry_exceeded_total", "Queue pairs failed after their retries ran out.", func(c *verbs.Counters) uint64 { return c.RetryExceeded }},
	{"rsock_device_rnr_retry_exceeded_total", "Queue pairs failed after their RNR retries ran out.", func(c *verbs.Counters) uint64 { return c.RNRRetryExceeded }},
	{"rsock_device_cq_overruns_total", "Completions lost to a full completion queue.", func(c *verbs.Counters) uint64 { return c.CQOverruns }},
	{"rsock_device_send_errors_total", "Packets the link failed to send.", func(c *verbs.Counters) uint64 { return c.SendErrors }},
	{"rsock_device_out_of_order_total", "Request packets placed ahead of a gap (selective repeat).", func(c *verbs.Counters) uint64 { return c.OutOfOrder }},
	{"rsock_device_unexpected_responses_total", "Responses dropped unread.", func(c *verbs.Counters) uint64 { return c.UnexpectedResponses }},
	{"rsock_device_out_of_sequence_total", "Request packets ahead of the expected PSN dropped unplaced.", func(c *verbs.Counters) uint64 { return c.OutOfSequence }},
	{"rsock_device_congestion_events_total", "Reductions of a send window by the congestion controller.", func(c *verbs.Counters) uint64 { return c.CongestionEvents }},
	{"rsock_device_ecn_capable_received_total", "Request packets that arrived ECN-capable (ECT or CE).", func(c *verbs.Counters) uint64 { return c.ECNCapableRecv }},
	{"rsock_device_ecn_ce_received_total", "Request packets that arrived CE-marked.", func(c *verbs.Counters) uint64 { return c.ECNCERecv }},
	{"rsock_device_ecn_echoes_sent_total", "ECN echoes sent to requesters.", func(c *verbs.Counters) uint64 { return c.ECNEchoesSent }},
	{"rsock_device_ecn_echoes_received_total", "ECN echoes received from responders.", func(c *verbs.Counters) uint64 { return c.ECNEchoesRecv }},
	{"rsock_device_ecn_marks_echoed_total", "CE marks that echoes reported on sent packets.", func(c *verbs.Counters) uint64 { return c.ECNMarksEchoed }},
	{"rsock_device_dup_echoes_sent_total", "Duplicate echoes sent to requesters.", func(c *verbs.Counters) uint64 { return c.DupEchoesSent }},
	{"rsock_device_dup_echoes_received_total", "Duplicate echoes received from responders.", func(c *verbs.Counters) uint64 { return c.DupEchoesRecv }},
	{"rsock_device_hold_echoes_sent_total", "Hold echoes sent to requesters.", func(c *verbs.Counters) uint64 { return c.HoldEchoesSent }},
	{"rsock_device_hold_echoes_received_total", "Hold echoes received from responders.", func(c *verbs.Counters) uint64 { return c.HoldEchoesRecv }},
	{"rsock_device_congestion_undos_total", "Window reductions undone because every resend behind them proved spurious.", func(c *verbs.Counters) uint64 { return c.CongestionUndos }},
}

// Write writes st in the text format.
func Write(out io.Writer, st netconn.State) error {
	w := &writer{b: bufio.NewWriter(out)}
	devLabels := func(d *netconn.DeviceState) [][2]string {
		return [][2]string{{"device", d.Name}, {"provider", d.Provider}, {"link", d.Link}}
	}
	for _, m := range deviceCounters {
		w.family(m.name, "counter", m.help)
		for i := range st.Devices {
			d := &st.Devices[i]
			w.sample(m.name, devLabels(d), m.get(&d.Counters))
		}
	}
	w.family("rsock_device_connections", "gauge", "Open connections on the device.")
	for i := range st.Devices {
		d := &st.Devices[i]
		w.sample("rsock_device_connections", devLabels(d), uint64(len(d.Conns)))
	}
	w.family("rsock_device_registered_bytes", "gauge", "Memory registered on the device.")
	for i := range st.Devices {
		d := &st.Devices[i]
		w.sample("rsock_device_registered_bytes", devLabels(d), d.RegisteredBytes)
	}
	w.family("rsock_tcp_connections", "gauge", "Open connections on TCP: fallbacks and plain clients.")
	w.sample("rsock_tcp_connections", nil, uint64(len(st.TCPConns)))
	w.family("rsock_registered_bytes", "gauge", "Memory registered on all devices.")
	w.sample("rsock_registered_bytes", nil, st.RegisteredBytes)
	w.family("rsock_fallbacks_total", "counter", "Connections that tried RDMA and went to TCP, by kind of reason.")
	for _, k := range netconn.FallbackKinds {
		w.sample("rsock_fallbacks_total", [][2]string{{"kind", k}}, st.Fallbacks[k])
	}
	w.family("rsock_pending_handshakes", "gauge", "Listeners' rsock handshakes in progress.")
	w.sample("rsock_pending_handshakes", nil, uint64(max(st.PendingHandshakes, 0)))
	w.family("rsock_handshake_failures_total", "counter", "Handshakes that ended without a connection.")
	w.sample("rsock_handshake_failures_total", nil, st.HandshakeFailures)
	w.family("rsock_connection_errors_total", "counter", "Connections whose reads or writes failed.")
	w.sample("rsock_connection_errors_total", nil, st.ConnErrors)
	return w.b.Flush()
}

// writer writes lines of the text format.
type writer struct {
	b *bufio.Writer
}

// family writes the HELP and TYPE lines of a metric family.
func (w *writer) family(name, typ, help string) {
	w.b.WriteString("# HELP ")
	w.b.WriteString(name)
	w.b.WriteByte(' ')
	w.b.WriteString(escapeHelp(help))
	w.b.WriteString("\n# TYPE ")
	w.b.WriteString(name)
	w.b.WriteByte(' ')
	w.b.WriteString(typ)
	w.b.WriteByte('\n')
}

// sample writes one sample line.
func (w *writer) sample(name string, labels [][2]string, v uint64) {
	w.b.WriteString(name)
	if len(labels) > 0 {
		w.b.WriteByte('{')
		for i, l := range labels {
			if i > 0 {
				w.b.WriteByte(',')
			}
			w.b.WriteString(l[0])
			w.b.WriteString(`="`)
			w.b.WriteString(escapeLabel(l[1]))
			w.b.WriteByte('"')
		}
		w.b.WriteByte('}')
	}
	w.b.WriteByte(' ')
	w.b.WriteString(strconv.FormatUint(v, 10))
	w.b.WriteByte('\n')
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, "\n", `\n`, `"`, `\"`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

// escapeLabel escapes a label value: backslash, double quote and line feed.
func escapeLabel(s string) string { return labelEscaper.Replace(s) }

// escapeHelp escapes a HELP text: backslash and line feed.
func escapeHelp(s string) string { return helpEscaper.Replace(s) }
