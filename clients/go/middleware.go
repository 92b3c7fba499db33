package pgidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// Route configures the middleware of one route.
type Route struct {
	// Template is the route as your router writes it, with {name} for each parameter
	// (/orders/{order_id}/pay): keys are scoped by method and template. Required.
	Template string
	// OptionalKey: a request without a key runs in a plain transaction, with no claim.
	OptionalKey bool
	// Lease (an interval such as "30 seconds") makes this a lease-mode route: the handler
	// runs outside any transaction and gets a *Lease (LeaseFrom).
	Lease string
	// TTL is how long the stored response is kept (an interval); "": the database's default.
	TTL string
	// Fields fingerprints these JSON fields of the body (pg_idem's canonical hash) instead of
	// the body's bytes.
	Fields []string
	// StatementTimeout and IdleInTransactionTimeout are set LOCAL to the claim's transaction;
	// 0: the contract's defaults.
	StatementTimeout, IdleInTransactionTimeout time.Duration
	// MaxBodyBytes is the largest body read for the fingerprint (beyond: 413); 0: the default.
	MaxBodyBytes int64
}

type route struct {
	Route
	ix                  *Idempotency
	claimSQL            string
	statementMs, idleMs string
}

// Middleware returns the net/http middleware of one route (chi's r.With(...), gorilla/mux's
// Use, or wrap the handler yourself). It panics when Template is empty.
func (ix *Idempotency) Middleware(rt Route) func(http.Handler) http.Handler {
	if rt.Template == "" {
		panic("pgidem: Route.Template is required (the route as written, with {name} parameters)")
	}
	r := ix.route(rt)
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) { r.serve(w, req, next) })
	}
}

func (ix *Idempotency) route(rt Route) *route {
	d := contract.Defaults
	ms := func(v time.Duration, def int64) string {
		if v <= 0 {
			return strconv.FormatInt(def, 10)
		}
		return strconv.FormatInt(v.Milliseconds(), 10)
	}
	if rt.MaxBodyBytes <= 0 {
		rt.MaxBodyBytes = d.MaxBodyBytes
	}
	return &route{Route: rt, ix: ix, claimSQL: statement("claim", ix.schema, rt.Fields != nil),
		statementMs: ms(rt.StatementTimeout, d.StatementTimeoutMs),
		idleMs:      ms(rt.IdleInTransactionTimeout, d.IdleInTransactionTimeoutMs)}
}

// claim is the row of `sql.claim`.
type claim struct {
	scopedKey, outcome string
	fence              sql.NullInt64
	attempt            sql.NullInt32
	responseCode       sql.NullInt32
	responseBody       sql.NullString
	checkpointPhase    sql.NullString
	checkpointData     sql.NullString
	retryAfter         sql.NullInt32
	txid               sql.NullInt64
}

func (r *route) serve(w http.ResponseWriter, req *http.Request, next http.Handler) {
	ix := r.ix
	o := Outcome{Method: req.Method, Route: r.Template}
	reject := func(name string, cause error) {
		o.Name, o.Err = "rejected", cause
		ix.report(o)
		writeError(w, newError(name, ix.retryAfter))
	}
	o.Tenant = ix.tenant(req)
	if o.Tenant == "" {
		reject("tenant_missing", nil)
		return
	}
	values := req.Header.Values(ix.keyHeader)
	if len(values) > 1 { // one key per request
		reject("key_invalid", nil)
		return
	}
	if len(values) == 1 {
		key, ok := parseKey(values[0])
		if !ok {
			reject("key_invalid", nil)
			return
		}
		o.Key = key
	} else if !r.OptionalKey {
		reject("key_missing", nil)
		return
	}
	if req.ContentLength > r.MaxBodyBytes {
		reject("payload_too_large", nil)
		return
	}
	body, err := io.ReadAll(io.LimitReader(req.Body, r.MaxBodyBytes+1))
	if err != nil {
		reject("payload_too_large", err) // the client's body broke off: nothing was claimed
		return
	}
	if int64(len(body)) > r.MaxBodyBytes {
		reject("payload_too_large", nil)
		return
	}
	ctx := req.Context()
	tx, err := ix.db.BeginTx(ctx, nil)
	if err != nil {
		r.dbError(w, o, err)
		return
	}
	if o.Key == "" { // optional key, none sent: a plain transaction
		h := &Tx{tx: tx, tenant: o.Tenant}
		r.inTransaction(w, req, next, body, h, o, nil)
		return
	}
	c, err := r.claim(ctx, tx, req, o.Tenant, o.Key, body)
	if err != nil {
		_ = tx.Rollback()
		r.dbError(w, o, err)
		return
	}
	if c.outcome != "claimed" {
		_ = tx.Rollback()
		r.unclaimed(w, o, c)
		return
	}
	o.Name = "claimed"
	ix.report(o)
	if r.Lease != "" {
		if err := tx.Commit(); err != nil {
			r.dbError(w, o, err)
			return
		}
		r.leased(w, req, next, body, o, c)
		return
	}
	h := &Tx{tx: tx, tenant: o.Tenant, key: o.Key}
	r.inTransaction(w, req, next, body, h, o, c)
}

// claim runs `sql.claim` in tx.
func (r *route) claim(ctx context.Context, tx *sql.Tx, req *http.Request, tenant, key string, body []byte) (*claim, error) {
	var lease, ttl interface{}
	if r.Lease != "" {
		lease = r.Lease
	}
	if r.TTL != "" {
		ttl = r.TTL
	}
	args := []interface{}{tenant, req.Method, r.Template, key, body, lease, ttl, r.statementMs, r.idleMs,
		requestTarget(req)}
	if r.Fields != nil { // $11 only where the statement names it: an unused one has no type
		args = append(args, textArray(r.Fields))
	}
	var c claim
	err := tx.QueryRowContext(ctx, r.claimSQL, args...).Scan(&c.scopedKey, &c.outcome, &c.fence,
		&c.attempt, &c.responseCode, &c.responseBody, &c.checkpointPhase, &c.checkpointData, &c.retryAfter,
		&c.txid, new(string), new(string))
	if err != nil {
		return nil, err
	}
	return &c, nil
}

// unclaimed answers a claim the database did not grant.
func (r *route) unclaimed(w http.ResponseWriter, o Outcome, c *claim) {
	ix := r.ix
	switch c.outcome {
	case "completed", "failed":
		var stored *string
		if c.responseBody.Valid {
			stored = &c.responseBody.String
		}
		lines, body, err := replay(stored)
		if err != nil {
			r.dbError(w, o, err)
			return
		}
		h := w.Header()
		hasType := false
		for _, l := range lines {
			h.Add(l.name, l.value)
			hasType = hasType || http.CanonicalHeaderKey(l.name) == "Content-Type"
		}
		if !hasType {
			h["Content-Type"] = nil // a stored response without one is replayed without one
		}
		h.Set(ix.replayHeader, contract.Defaults.ReplayHeaderValue)
		o.Name = "replayed"
		ix.report(o)
		w.WriteHeader(int(c.responseCode.Int32))
		_, _ = w.Write(body)
	case "in_progress":
		after := ix.retryAfter
		if c.retryAfter.Valid {
			after = int(c.retryAfter.Int32)
		}
		o.Name = "in_progress"
		ix.report(o)
		writeError(w, newError("in_progress", after))
	case "mismatch":
		o.Name = "mismatch"
		ix.report(o)
		writeError(w, newError("mismatch", ix.retryAfter))
	case "stale_key":
		o.Name = "rejected" // pg_idem.reject_stale_uuidv7: refused before any claim
		ix.report(o)
		writeError(w, newError("stale_key", ix.retryAfter))
	default:
		r.dbError(w, o, fmt.Errorf("pgidem: idem_claim answered an unknown outcome %q", c.outcome))
	}
}

func (r *route) dbError(w http.ResponseWriter, o Outcome, err error) {
	e := fromDB(err, r.ix.retryAfter)
	o.Name, o.Err = "database_error", err
	if e.Name == "lease_lost" {
		o.Name = "lease_lost"
	}
	r.ix.report(o)
	writeError(w, e)
}

// runHandler runs next with the buffered writer; a panic is handed back after cleanup ran.
func runHandler(next http.Handler, req *http.Request, b *buffer, cleanup func()) {
	defer func() {
		if p := recover(); p != nil {
			cleanup()
			panic(p)
		}
	}()
	next.ServeHTTP(b, req)
}

// inTransaction runs the handler in tx (the claim's, when c is not nil), stores a final
// response with the claim, commits, and only then answers.
func (r *route) inTransaction(w http.ResponseWriter, req *http.Request, next http.Handler, body []byte,
	h *Tx, o Outcome, c *claim) {
	tx := h.tx
	b := newBuffer()
	req = withBody(req.WithContext(context.WithValue(req.Context(), txKey, h)), body)
	rolledBack := func() {
		_ = tx.Rollback()
		if c != nil {
			o.Name = "rolled_back"
			r.ix.report(o)
		}
	}
	runHandler(next, req, b, rolledBack)
	if b.errName != "" || !isFinal(b.statusCode()) || req.Context().Err() != nil {
		rolledBack()
		b.sendTo(w)
		return
	}
	b.settle()
	if c != nil {
		done, err := r.store(req.Context(), tx, o, c.scopedKey, c.fence.Int64, c.txid, b)
		if err == nil && !done {
			_ = tx.Rollback()
			o.Name, o.Err = "transaction_ended", errors.New("the completion found another transaction")
			r.ix.report(o)
			writeError(w, newError("internal_error", r.ix.retryAfter))
			return
		}
		if err != nil {
			_ = tx.Rollback()
			r.dbError(w, o, err)
			return
		}
	}
	if err := tx.Commit(); err != nil {
		if c != nil {
			r.dbError(w, o, err)
		} else {
			writeError(w, fromDB(err, r.ix.retryAfter))
		}
		return
	}
	if c != nil {
		o.Name = "stored"
		r.ix.report(o)
	}
	b.sendTo(w)
}

// store runs `sql.complete` (status < 400) or `sql.fail_final` (4xx) in tx; done is false when
// the statement returned no row (the guard: tx is not the claim's transaction any more).
func (r *route) store(ctx context.Context, tx *sql.Tx, o Outcome, scopedKey string, fence int64,
	txid sql.NullInt64, b *buffer) (bool, error) {
	env, err := envelope(r.ix.stored, b.header, b.body.Bytes())
	if err != nil {
		return false, err
	}
	name := "complete"
	if b.statusCode() >= 400 {
		name = "fail_final"
	}
	var id interface{}
	if txid.Valid {
		id = txid.Int64
	}
	rows, err := tx.QueryContext(ctx, statement(name, r.ix.schema, false), o.Tenant, scopedKey, fence,
		b.statusCode(), string(env), id)
	if err != nil {
		return false, err
	}
	defer rows.Close()
	done := rows.Next()
	if err := rows.Err(); err != nil {
		return false, err
	}
	return done, rows.Close()
}

// withBody gives the handler the body the middleware read.
func withBody(req *http.Request, body []byte) *http.Request {
	req.Body = io.NopCloser(bytesReader(body))
	req.ContentLength = int64(len(body))
	return req
}
