package pgidem

import (
	"log"
	"sync/atomic"
)

// Outcome is how one request ended, as reported to Options.OnOutcome.
type Outcome struct {
	// Name is one of the contract's outcomes: claimed, replayed, mismatch, in_progress, stored,
	// rolled_back, lease_lost, transaction_ended, rejected, database_error. A claimed request
	// reports claimed and then how it ended.
	Name   string
	Method string
	Route  string // the route template
	Tenant string
	Key    string // the parsed key ("" when refused before one was read)
	Err    error  // the cause, for rejected, transaction_ended and database_error
}

type counters struct {
	byName map[string]*atomic.Int64
	order  []string
}

func newCounters() *counters {
	c := &counters{byName: map[string]*atomic.Int64{}, order: contract.Outcomes}
	for _, name := range contract.Outcomes {
		c.byName[name] = new(atomic.Int64)
	}
	return c
}

// Outcomes returns the count of every outcome name since New (every name present).
func (ix *Idempotency) Outcomes() map[string]int64 {
	out := make(map[string]int64, len(ix.counts.order))
	for _, name := range ix.counts.order {
		out[name] = ix.counts.byName[name].Load()
	}
	return out
}

func (ix *Idempotency) report(o Outcome) {
	ix.counts.byName[o.Name].Add(1)
	if ix.onOutcome != nil {
		ix.onOutcome(o)
		return
	}
	switch o.Name {
	case "transaction_ended":
		log.Printf("pgidem: ERROR %s %s key %q: the handler ended the claim's transaction (COMMIT or ROLLBACK as SQL); "+
			"nothing was stored and the key stays in progress until its ttl: %v", o.Method, o.Route, o.Key, o.Err)
	case "database_error":
		log.Printf("pgidem: ERROR %s %s key %q: %v", o.Method, o.Route, o.Key, o.Err)
	}
}
