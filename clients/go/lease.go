package pgidem

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"net/http"
	"sync"
	"time"
)

func bytesReader(b []byte) *bytes.Reader { return bytes.NewReader(b) }

// Lease is what the handler of a lease-mode route gets (LeaseFrom): the claim, committed at
// once, and the helpers of a handler that calls other services. The handler runs outside any
// transaction; its business writes go in the completion transaction (Begin).
type Lease struct {
	route           *route
	method          string
	tenant, key     string
	scopedKey       string
	fence           int64
	attempt         int
	checkpointPhase string
	checkpointData  json.RawMessage

	mu sync.Mutex
	tx *Tx // the completion transaction, once opened
}

func (l *Lease) Tenant() string    { return l.tenant }
func (l *Lease) Key() string       { return l.key }
func (l *Lease) ScopedKey() string { return l.scopedKey }
func (l *Lease) Fence() int64      { return l.fence }

// Attempt is 1 on the first attempt, higher after a takeover of an expired lease.
func (l *Lease) Attempt() int { return l.attempt }

// CheckpointPhase and CheckpointData are what an earlier attempt saved: resume from there.
func (l *Lease) CheckpointPhase() string         { return l.checkpointPhase }
func (l *Lease) CheckpointData() json.RawMessage { return l.checkpointData }

// DownstreamKey is the same UUID on every attempt of this key for step: send it as the
// external call's idempotency key.
func (l *Lease) DownstreamKey(ctx context.Context, step string) (string, error) {
	var key string
	err := l.short(ctx, "downstream_key", func(row *sql.Row) error { return row.Scan(&key) }, step)
	return key, err
}

// Checkpoint saves progress (data is marshalled to JSON) under the fence, in a short
// transaction of its own.
func (l *Lease) Checkpoint(ctx context.Context, phase string, data interface{}) error {
	j, err := json.Marshal(data)
	if err != nil {
		return err
	}
	return l.short(ctx, "checkpoint", scanNothing, l.fence, phase, string(j))
}

// Heartbeat extends the lease under the fence by lease (an interval), or "" by the route's,
// and returns when it now expires.
func (l *Lease) Heartbeat(ctx context.Context, lease string) (time.Time, error) {
	if lease == "" {
		lease = l.route.Lease // (NULL would be the database's own default, not the route's)
	}
	var expires time.Time
	err := l.short(ctx, "heartbeat", func(row *sql.Row) error { return row.Scan(&expires) }, l.fence, lease)
	return expires, err
}

// Begin opens the completion transaction (once; later calls return the same one) after
// checking the fence, for the handler's business writes. It fails with a *Error named
// lease_lost when another attempt took the key over: answer it with WriteError.
func (l *Lease) Begin(ctx context.Context) (*Tx, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tx != nil {
		return l.tx, nil
	}
	tx, err := l.route.ix.db.BeginTx(ctx, nil)
	if err != nil {
		return nil, fromDB(err, l.route.ix.retryAfter)
	}
	rows, err := tx.QueryContext(ctx, statement("assert_fence", l.route.ix.schema, false), l.tenant, l.scopedKey, l.fence)
	if err == nil {
		err = rows.Close()
	}
	if err != nil {
		_ = tx.Rollback()
		return nil, fromDB(err, l.route.ix.retryAfter)
	}
	l.tx = &Tx{tx: tx, tenant: l.tenant, key: l.key}
	return l.tx, nil
}

func scanNothing(row *sql.Row) error { return row.Scan(new(interface{})) }

// short runs one statement with $1 tenant, $2 scoped key and args in a transaction of its own.
func (l *Lease) short(ctx context.Context, name string, scan func(*sql.Row) error, args ...interface{}) error {
	tx, err := l.route.ix.db.BeginTx(ctx, nil)
	if err != nil {
		return fromDB(err, l.route.ix.retryAfter)
	}
	defer func() { _ = tx.Rollback() }()
	all := append([]interface{}{l.tenant, l.scopedKey}, args...)
	if err := scan(tx.QueryRowContext(ctx, statement(name, l.route.ix.schema, false), all...)); err != nil {
		return fromDB(err, l.route.ix.retryAfter)
	}
	if err := tx.Commit(); err != nil {
		return fromDB(err, l.route.ix.retryAfter)
	}
	return nil
}

// takeTx is the completion transaction, opened now when the handler did not.
func (l *Lease) takeTx(ctx context.Context) (*sql.Tx, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tx != nil {
		tx := l.tx.tx
		l.tx = nil
		return tx, nil
	}
	// no assert_fence: complete and fail_final check the fence themselves
	return l.route.ix.db.BeginTx(ctx, nil)
}

// abandon rolls the completion transaction back and, unless the key is no longer ours,
// releases it so that the retry is claimed at once.
func (l *Lease) abandon(lost bool) {
	l.mu.Lock()
	if l.tx != nil {
		_ = l.tx.tx.Rollback()
		l.tx = nil
	}
	l.mu.Unlock()
	if lost {
		return
	}
	// the request's context may be gone (a client that hung up): the release must still run
	if err := l.short(context.Background(), "release", scanNothing, l.fence); err != nil {
		l.route.ix.report(Outcome{Name: "database_error", Method: l.method, Route: l.route.Template,
			Tenant: l.tenant, Key: l.key, Err: err})
	}
}

// leased runs the rest of a lease-mode request after its claim was committed.
func (r *route) leased(w http.ResponseWriter, req *http.Request, next http.Handler, body []byte, o Outcome, c *claim) {
	l := &Lease{route: r, method: o.Method, tenant: o.Tenant, key: o.Key, scopedKey: c.scopedKey, fence: c.fence.Int64,
		attempt: int(c.attempt.Int32), checkpointPhase: c.checkpointPhase.String}
	if c.checkpointData.Valid {
		l.checkpointData = json.RawMessage(c.checkpointData.String)
	}
	b := newBuffer()
	req = withBody(req.WithContext(context.WithValue(req.Context(), leaseKey, l)), body)
	runHandler(next, req, b, func() {
		l.abandon(false)
		o.Name = "rolled_back"
		r.ix.report(o)
	})
	if b.errName != "" || !isFinal(b.statusCode()) {
		lost := b.errName == "lease_lost"
		l.abandon(lost)
		o.Name = "rolled_back"
		if lost {
			o.Name = "lease_lost"
		}
		r.ix.report(o)
		b.sendTo(w)
		return
	}
	b.settle()
	// the completion outlives a client that hung up: its effects happened
	ctx := context.Background()
	tx, err := l.takeTx(ctx)
	if err == nil {
		_, err = r.store(ctx, tx, o, l.scopedKey, l.fence, sql.NullInt64{}, b)
		if err == nil {
			err = tx.Commit()
		} else {
			_ = tx.Rollback()
		}
	}
	if err != nil {
		e := fromDB(err, r.ix.retryAfter)
		l.abandon(e.Name == "lease_lost")
		r.dbError(w, o, err)
		return
	}
	o.Name = "stored"
	r.ix.report(o)
	b.sendTo(w)
}
