package pgidem

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"net/http"
)

// Claimed is a key claimed in a transaction you own (Idempotency.Claim): the middleware's
// steps as calls, for code that opens its transactions itself.
type Claimed struct {
	// Outcome is pg_idem's: claimed (do the work in your transaction, then Complete), or
	// completed, failed, in_progress, mismatch, stale_key (WriteAnswer, then roll back).
	Outcome   string
	ScopedKey string
	Fence     int64
	route     *route
	claim     *claim
	o         Outcome
}

// ErrTransactionEnded is the cause of Complete's *Error when the transaction is not the one
// that claimed the key any more (COMMIT or ROLLBACK was sent as SQL): roll back, answer 500.
var ErrTransactionEnded = errors.New("pgidem: the transaction that claimed the key has ended")

// Claim claims req's key in tx, a transaction you began on the *sql.DB given to New: the key
// from the key header, tenant from your auth, body the bytes you read (fingerprinted with
// req's method and target). A refusal before any claim (key missing or invalid, no tenant) is
// a *Error; answer it with WriteError and roll back.
func (ix *Idempotency) Claim(ctx context.Context, tx *sql.Tx, rt Route, req *http.Request, tenant string, body []byte) (*Claimed, error) {
	if rt.Template == "" {
		return nil, errors.New("pgidem: Route.Template is required")
	}
	r := ix.route(rt)
	o := Outcome{Method: req.Method, Route: rt.Template, Tenant: tenant}
	reject := func(name string) (*Claimed, error) {
		o.Name = "rejected"
		ix.report(o)
		return nil, newError(name, ix.retryAfter)
	}
	if tenant == "" {
		return reject("tenant_missing")
	}
	values := req.Header.Values(ix.keyHeader)
	if len(values) != 1 {
		if len(values) == 0 {
			return reject("key_missing")
		}
		return reject("key_invalid")
	}
	key, ok := parseKey(values[0])
	if !ok {
		return reject("key_invalid")
	}
	o.Key = key
	c, err := r.claim(ctx, tx, req, tenant, key, body)
	if err != nil {
		o.Name, o.Err = "database_error", err
		ix.report(o)
		return nil, fromDB(err, ix.retryAfter)
	}
	if c.outcome == "claimed" {
		o.Name = "claimed"
		ix.report(o)
	}
	return &Claimed{Outcome: c.outcome, ScopedKey: c.scopedKey, Fence: c.fence.Int64, route: r, claim: c, o: o}, nil
}

// WriteAnswer answers a key that was not claimed: the stored response (replayed), 409 with
// Retry-After, 422 or 400 stale_key. Roll your transaction back.
func (c *Claimed) WriteAnswer(w http.ResponseWriter) {
	c.route.unclaimed(w, c.o, c.claim)
}

// Complete stores a final response with the claim in tx (call it last, then COMMIT, and send
// the response only after the commit succeeded). A status that is not final stores nothing:
// roll back instead. The *Error it returns is ready for WriteError: roll back first. The
// outcome stored is counted here: a COMMIT of yours that fails is yours to report.
func (ix *Idempotency) Complete(ctx context.Context, tx *sql.Tx, c *Claimed, status int, header http.Header, body []byte) error {
	if !isFinal(status) {
		return errors.New("pgidem: Complete with a status that is not final: roll back instead")
	}
	b := &buffer{header: header, status: status}
	b.body = *bytes.NewBuffer(body)
	b.settle()
	done, err := c.route.store(ctx, tx, c.o, c.ScopedKey, c.Fence, c.claim.txid, b)
	o := c.o
	switch {
	case err != nil:
		o.Name, o.Err = "database_error", err
		ix.report(o)
		return fromDB(err, ix.retryAfter)
	case !done:
		o.Name, o.Err = "transaction_ended", ErrTransactionEnded
		ix.report(o)
		e := newError("internal_error", ix.retryAfter)
		e.cause = ErrTransactionEnded
		return e
	}
	o.Name = "stored"
	ix.report(o)
	return nil
}
