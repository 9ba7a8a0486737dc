package softroce

import (
	"sync/atomic"

	"github.com/rsock-go/rsock/verbs"
)

// counter indexes one statistic.
type counter int

const (
	cSentPackets counter = iota
	cRecvPackets
	cRetransmits
	cTimeouts
	cSeqNAKsSent
	cSeqNAKsRecv
	cRNRNAKsSent
	cRNRNAKsRecv
	cICRCErrors
	cICRCUnverified
	cDuplicates
	cAccessErrors
	cMalformed
	cUnknownQP
	cWrongPeer
	cRetryExceeded
	cRNRRetryExceeded
	cCQOverruns
	cSendErrors
	cOutOfOrder
	cUnexpectedResponses
	cOutOfSequence
	cCongestionEvents
	cECNCapableRecv
	cECNCERecv
	cECNEchoesSent
	cECNEchoesRecv
	cECNMarksEchoed
	cDupEchoesSent
	cDupEchoesRecv
	cHoldEchoesSent
	cHoldEchoesRecv
	cCongestionUndos
	cSpuriousTimeouts
	numCounters
)

// counters is a set of statistics updated without locks.
type counters [numCounters]atomic.Uint64

func (c *counters) add(k counter, n uint64) { c[k].Add(n) }

func (c *counters) snapshot() verbs.Counters {
	return verbs.Counters{
		SentPackets:      c[cSentPackets].Load(),
		RecvPackets:      c[cRecvPackets].Load(),
		Retransmits:      c[cRetransmits].Load(),
		Timeouts:         c[cTimeouts].Load(),
		SeqNAKsSent:      c[cSeqNAKsSent].Load(),
		SeqNAKsRecv:      c[cSeqNAKsRecv].Load(),
		RNRNAKsSent:      c[cRNRNAKsSent].Load(),
		RNRNAKsRecv:      c[cRNRNAKsRecv].Load(),
		ICRCErrors:       c[cICRCErrors].Load(),
		ICRCUnverified:   c[cICRCUnverified].Load(),
		Duplicates:       c[cDuplicates].Load(),
		AccessErrors:     c[cAccessErrors].Load(),
		Malformed:        c[cMalformed].Load(),
		UnknownQP:        c[cUnknownQP].Load(),
		WrongPeer:        c[cWrongPeer].Load(),
		RetryExceeded:    c[cRetryExceeded].Load(),
		RNRRetryExceeded: c[cRNRRetryExceeded].Load(),
		CQOverruns:       c[cCQOverruns].Load(),
		SendErrors:       c[cSendErrors].Load(),
		OutOfOrder:       c[cOutOfOrder].Load(),

		UnexpectedResponses: c[cUnexpectedResponses].Load(),
		OutOfSequence:       c[cOutOfSequence].Load(),
		CongestionEvents:    c[cCongestionEvents].Load(),

		ECNCapableRecv: c[cECNCapableRecv].Load(),
		ECNCERecv:      c[cECNCERecv].Load(),
		ECNEchoesSent:  c[cECNEchoesSent].Load(),
		ECNEchoesRecv:  c[cECNEchoesRecv].Load(),
		ECNMarksEchoed: c[cECNMarksEchoed].Load(),

		DupEchoesSent:   c[cDupEchoesSent].Load(),
		DupEchoesRecv:   c[cDupEchoesRecv].Load(),
		HoldEchoesSent:  c[cHoldEchoesSent].Load(),
		HoldEchoesRecv:  c[cHoldEchoesRecv].Load(),
		CongestionUndos: c[cCongestionUndos].Load(),

		SpuriousTimeouts: c[cSpuriousTimeouts].Load(),
	}
}
