package pgidem

import (
	"context"
	"database/sql"
	"errors"
	"net/http"
)

// ErrTransactionOwned is what Tx.Commit and Tx.Rollback return: the middleware ends the
// transaction, after storing the response with the claim.
var ErrTransactionOwned = errors.New("pgidem: the claim's transaction is ended by the middleware, not by the handler")

// Tx is the transaction the handler works in: in transaction mode the claim's, in lease mode
// the completion transaction (Lease.Begin). It has database/sql's query methods (it satisfies
// sqlc's DBTX) but cannot be ended: Commit and Rollback return ErrTransactionOwned. Sending
// COMMIT or ROLLBACK as SQL is detected when the response is stored (500, outcome
// transaction_ended) but cannot be undone: the claim stays in progress until its ttl.
type Tx struct {
	tx     *sql.Tx
	tenant string
	key    string
}

func (t *Tx) ExecContext(ctx context.Context, query string, args ...interface{}) (sql.Result, error) {
	return t.tx.ExecContext(ctx, query, args...)
}

func (t *Tx) QueryContext(ctx context.Context, query string, args ...interface{}) (*sql.Rows, error) {
	return t.tx.QueryContext(ctx, query, args...)
}

func (t *Tx) QueryRowContext(ctx context.Context, query string, args ...interface{}) *sql.Row {
	return t.tx.QueryRowContext(ctx, query, args...)
}

// PrepareContext prepares in the transaction (a named statement with most drivers: not for
// PgBouncer in transaction mode).
func (t *Tx) PrepareContext(ctx context.Context, query string) (*sql.Stmt, error) {
	return t.tx.PrepareContext(ctx, query)
}

// Commit refuses: see Tx.
func (t *Tx) Commit() error { return ErrTransactionOwned }

// Rollback refuses: see Tx. Return a non-final status (or panic) to roll back.
func (t *Tx) Rollback() error { return ErrTransactionOwned }

// Tenant is the request's tenant.
func (t *Tx) Tenant() string { return t.tenant }

// Key is the parsed Idempotency-Key ("" on an optional-key route called without one).
func (t *Tx) Key() string { return t.key }

type ctxKey int

const (
	txKey ctxKey = iota
	leaseKey
)

// TxFrom returns the transaction of a request on a transaction-mode route (nil elsewhere).
func TxFrom(r *http.Request) *Tx { return TxFromContext(r.Context()) }

// TxFromContext is TxFrom for a context (echo's and gin's request context carry it).
func TxFromContext(ctx context.Context) *Tx {
	t, _ := ctx.Value(txKey).(*Tx)
	return t
}

// LeaseFrom returns the lease of a request on a lease-mode route (nil elsewhere).
func LeaseFrom(r *http.Request) *Lease { return LeaseFromContext(r.Context()) }

// LeaseFromContext is LeaseFrom for a context.
func LeaseFromContext(ctx context.Context) *Lease {
	l, _ := ctx.Value(leaseKey).(*Lease)
	return l
}
