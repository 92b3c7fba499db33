// Package pgidem maps the Idempotency-Key header to pg_idem, for net/http: a middleware that
// claims the key inside the business transaction, hands the handler that transaction, stores
// the response with the claim and only then answers. It follows clients/CONTRACT.md (contract
// 2); every fact (SQL, errors, defaults) comes from the embedded contract.json. The database
// driver is yours (lib/pq or pgx's stdlib): this package uses database/sql only.
package pgidem

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Options configure an Idempotency: what every route shares.
type Options struct {
	// Tenant returns the tenant of a request, from your auth (never a value the client picks
	// freely). "" answers 400 tenant_missing before any claim. Required unless SingleTenant.
	Tenant func(r *http.Request) string
	// SingleTenant names the one tenant every caller shares; it cannot be set with Tenant.
	SingleTenant string
	// Schema is pg_idem's schema; empty: found with the contract's `sql.locate`.
	Schema string
	// StoredHeaders are the response headers stored and replayed (case-insensitive); nil: the
	// contract's defaults. Naming a never-stored header (set-cookie, ...) is refused by New.
	StoredHeaders []string
	// KeyHeader and ReplayHeader default to the contract's.
	KeyHeader, ReplayHeader string
	// RetryAfter is the Retry-After of an in_progress answer whose holder has no lease.
	RetryAfter time.Duration
	// OnOutcome receives every request's outcome (logging, metrics, tracing). Without it,
	// transaction_ended and database_error are written with the standard log package.
	OnOutcome func(Outcome)
}

// Idempotency is pg_idem on one *sql.DB; Route makes the middleware of each route.
type Idempotency struct {
	db           *sql.DB
	schema       string
	tenant       func(r *http.Request) string
	stored       []string
	keyHeader    string
	replayHeader string
	retryAfter   int
	counts       *counters
	onOutcome    func(Outcome)
}

// New checks the options and pg_idem (its schema, once per *sql.DB, and its version), and
// refuses with an error that says what to do.
func New(ctx context.Context, db *sql.DB, opts Options) (*Idempotency, error) {
	d := contract.Defaults
	ix := &Idempotency{db: db, keyHeader: d.KeyHeader, replayHeader: d.ReplayHeader,
		retryAfter: d.RetryAfterSeconds, counts: newCounters(), onOutcome: opts.OnOutcome}
	switch {
	case opts.Tenant != nil && opts.SingleTenant != "":
		return nil, errors.New("pgidem: Options.Tenant and Options.SingleTenant are both set: keep one")
	case opts.Tenant != nil:
		ix.tenant = opts.Tenant
	case opts.SingleTenant != "":
		one := opts.SingleTenant
		ix.tenant = func(*http.Request) string { return one }
	default:
		return nil, errors.New("pgidem: no tenant: set Options.Tenant (your auth's account of the caller), " +
			"or Options.SingleTenant when every caller shares one namespace")
	}
	ix.stored = d.StoredHeaders
	if opts.StoredHeaders != nil {
		ix.stored = nil
		for _, h := range opts.StoredHeaders {
			lower := strings.ToLower(h)
			if neverStored(lower) {
				return nil, fmt.Errorf("pgidem: StoredHeaders names %q, which is never stored (a replay goes to whoever holds the key)", h)
			}
			ix.stored = append(ix.stored, lower)
		}
	}
	if opts.KeyHeader != "" {
		ix.keyHeader = opts.KeyHeader
	}
	if opts.ReplayHeader != "" {
		ix.replayHeader = opts.ReplayHeader
	}
	if opts.RetryAfter > 0 {
		ix.retryAfter = int((opts.RetryAfter + time.Second - 1) / time.Second)
	}
	schema, err := locate(ctx, db, opts.Schema)
	if err != nil {
		return nil, err
	}
	ix.schema = schema
	return ix, nil
}

type located struct {
	db     *sql.DB
	schema string
}

// checked remembers the pools (and schema options) already checked: once per *sql.DB.
var checked sync.Map // located -> quoted schema

func locate(ctx context.Context, db *sql.DB, option string) (string, error) {
	if s, ok := checked.Load(located{db, option}); ok {
		return s.(string), nil
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return "", fmt.Errorf("pgidem: cannot reach the database: %w", err)
	}
	defer func() { _ = tx.Rollback() }()
	schema := quoteIdent(option)
	if option == "" {
		var foreign sql.NullString
		err = tx.QueryRowContext(ctx, contract.SQL["locate"]).Scan(&schema, &foreign)
		if errors.Is(err, sql.ErrNoRows) {
			return "", errors.New("pgidem: pg_idem is not installed in this database (CREATE EXTENSION pg_idem, or install its SQL edition)")
		}
		if err != nil {
			return "", fmt.Errorf("pgidem: looking for pg_idem failed: %w", err)
		}
		if foreign.Valid {
			return "", fmt.Errorf("pgidem: schema %s holds idem_* functions that are not pg_idem's: %s; drop them, or ask who created them", schema, foreign.String)
		}
	}
	var version string
	min := contract.MinPgIdemVersion
	if err = tx.QueryRowContext(ctx, statement("version", schema, false)).Scan(&version); err != nil {
		var st sqlStater
		if errors.As(err, &st) && st.SQLState() == "42883" { // undefined_function
			return "", fmt.Errorf("pgidem: the pg_idem in schema %s has no idem_version(): it is older than %s, "+
				"the minimum this package needs: ALTER EXTENSION pg_idem UPDATE (or install a newer SQL edition)", schema, min)
		}
		return "", fmt.Errorf("pgidem: pg_idem's version could not be read in schema %s: %w", schema, err)
	}
	if !versionAtLeast(version, min) {
		return "", fmt.Errorf("pgidem: pg_idem %s is installed; this package needs %s or later: ALTER EXTENSION pg_idem UPDATE", version, min)
	}
	checked.Store(located{db, option}, schema)
	return schema, nil
}

// Schema is pg_idem's schema, quoted as an identifier, as every statement names it.
func (ix *Idempotency) Schema() string { return ix.schema }
