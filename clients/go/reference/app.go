// Package reference is pg_idem's reference app for Go (clients/CONTRACT.md, "The reference
// apps"): chi, lib/pq and the pgidem middleware. cmd/pg-idem-reference starts it.
package reference

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/go-chi/chi/v5/middleware"

	pgidem "pg_idem/clients/go"
)

// Constants is the contract's reference_app section.
type Constants struct {
	Tables                     []string `json:"tables"`
	StatementTimeoutMs         int64    `json:"statement_timeout_ms"`
	IdleInTransactionTimeoutMs int64    `json:"idle_in_transaction_timeout_ms"`
	PayoutLease                string   `json:"payout_lease"`
	PaymentJSON                string   `json:"payment_json"`
	PaymentText                string   `json:"payment_text"`
	DeclinedJSON               string   `json:"declined_json"`
	PayoutJSON                 string   `json:"payout_json"`
	OrderRoute                 string   `json:"order_route"`
	Cookie                     string   `json:"cookie"`
	Links                      []string `json:"links"`
	StoredHeaders              []string `json:"stored_headers"`
}

// LoadConstants reads reference_app from the package's embedded contract.json.
func LoadConstants() (Constants, error) {
	var c struct {
		ReferenceApp Constants `json:"reference_app"`
	}
	err := json.Unmarshal(pgidem.ContractJSON(), &c)
	return c.ReferenceApp, err
}

// New creates the app's tables and returns its router and its Idempotency (for the counts).
func New(ctx context.Context, db *sql.DB) (http.Handler, *pgidem.Idempotency, error) {
	k, err := LoadConstants()
	if err != nil {
		return nil, nil, err
	}
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return nil, nil, err
	}
	defer func() { _ = tx.Rollback() }()
	// CONTRACT.md "The reference apps": the apps' lock, then the tables (named with their schema)
	for _, stmt := range k.Tables {
		if _, err := tx.ExecContext(ctx, stmt); err != nil {
			return nil, nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, nil, err
	}
	ix, err := pgidem.New(ctx, db, pgidem.Options{
		Tenant:        func(r *http.Request) string { return r.Header.Get("X-Tenant") },
		StoredHeaders: k.StoredHeaders,
	})
	if err != nil {
		return nil, nil, err
	}
	timeouts := func(rt pgidem.Route) pgidem.Route {
		rt.StatementTimeout = time.Duration(k.StatementTimeoutMs) * time.Millisecond
		rt.IdleInTransactionTimeout = time.Duration(k.IdleInTransactionTimeoutMs) * time.Millisecond
		return rt
	}
	a := &app{k: k, seen: map[string]bool{}}
	r := chi.NewRouter()
	// a panic in a handler: pgidem rolls back and passes it on, Recoverer answers 500
	r.Use(middleware.Recoverer)
	r.With(ix.Middleware(timeouts(pgidem.Route{Template: "/payments"}))).Post("/payments", a.payment)
	r.With(ix.Middleware(timeouts(pgidem.Route{Template: k.OrderRoute}))).Post(k.OrderRoute, a.orderPayment)
	r.With(ix.Middleware(timeouts(pgidem.Route{Template: "/payouts", Lease: k.PayoutLease}))).Post("/payouts", a.payout)
	r.Get("/_pg_idem/outcomes", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(ix.Outcomes())
	})
	return r, ix, nil
}

type app struct {
	k    Constants
	mu   sync.Mutex
	seen map[string]bool // (tenant, key) whose transient failure already happened
}

type paymentBody struct {
	Amount    int64
	SleepMs   int64
	Fail      string
	Format    string
	Cookie    bool
	Links     bool
	Commit    string
	Heartbeat bool
}

// parseBody: a JSON object with an integer amount, else 400 bad_request (a final 4xx: stored).
func parseBody(w http.ResponseWriter, r *http.Request) (paymentBody, bool) {
	var raw map[string]json.RawMessage
	var p paymentBody
	dec := json.NewDecoder(r.Body)
	err := dec.Decode(&raw)
	if err == nil {
		err = json.Unmarshal(raw["amount"], &p.Amount)
	}
	if err != nil || raw["amount"] == nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"error":"bad_request","message":"the body must be a JSON object with an integer amount"}`))
		return p, false
	}
	opt := func(name string, into interface{}) {
		if v, ok := raw[name]; ok {
			_ = json.Unmarshal(v, into)
		}
	}
	opt("sleep_ms", &p.SleepMs)
	opt("fail", &p.Fail)
	opt("format", &p.Format)
	opt("set_cookie", &p.Cookie)
	opt("links", &p.Links)
	opt("commit", &p.Commit)
	opt("heartbeat", &p.Heartbeat)
	return p, true
}

func fill(template string, values ...string) string {
	return strings.NewReplacer(values...).Replace(template)
}

func (a *app) payment(w http.ResponseWriter, r *http.Request) {
	tx := pgidem.TxFrom(r)
	p, ok := parseBody(w, r)
	if !ok {
		return
	}
	amount := strconv.FormatInt(p.Amount, 10)
	if p.Fail == "final" {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusPaymentRequired)
		_, _ = w.Write([]byte(fill(a.k.DeclinedJSON, "{amount}", amount)))
		return
	}
	var id int64
	err := tx.QueryRowContext(r.Context(), "INSERT INTO public.payments (tenant, idem_key, amount) VALUES ($1, $2, $3) RETURNING id",
		tx.Tenant(), tx.Key(), p.Amount).Scan(&id)
	if err != nil {
		pgidem.WriteError(w, err)
		return
	}
	time.Sleep(time.Duration(p.SleepMs) * time.Millisecond)
	if p.Fail == "transient" && a.firstFailure(tx.Tenant(), tx.Key()) {
		panic("reference app: a transient failure on the first attempt")
	}
	switch p.Commit {
	case "api":
		if err := tx.Commit(); err != nil {
			panic(err) // pgidem refuses: the exception makes a 500 and the insert rolls back
		}
	case "sql":
		if _, err := tx.ExecContext(r.Context(), "COMMIT"); err != nil {
			pgidem.WriteError(w, err)
			return
		}
	}
	h := w.Header()
	h.Set("Location", fmt.Sprintf("/payments/%d", id))
	if p.Cookie {
		h.Set("Set-Cookie", a.k.Cookie)
	}
	if p.Links {
		for _, link := range a.k.Links {
			h.Add("Link", link)
		}
	}
	values := []string{"{id}", strconv.FormatInt(id, 10), "{amount}", amount}
	if p.Format == "text" {
		h.Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusCreated)
		_, _ = w.Write([]byte(fill(a.k.PaymentText, values...)))
		return
	}
	h.Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(fill(a.k.PaymentJSON, values...)))
}

func (a *app) firstFailure(tenant, key string) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	id := tenant + "\x00" + key
	if a.seen[id] {
		return false
	}
	a.seen[id] = true
	return true
}

func (a *app) orderPayment(w http.ResponseWriter, r *http.Request) {
	tx := pgidem.TxFrom(r)
	p, ok := parseBody(w, r)
	if !ok {
		return
	}
	order, err := strconv.ParseInt(chi.URLParam(r, "order_id"), 10, 64)
	if err != nil {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":"not_found","message":"no such order"}`))
		return
	}
	var id int64
	err = tx.QueryRowContext(r.Context(), "INSERT INTO public.payments (tenant, idem_key, amount, order_id) VALUES ($1, $2, $3, $4) RETURNING id",
		tx.Tenant(), tx.Key(), p.Amount, order).Scan(&id)
	if err != nil {
		pgidem.WriteError(w, err)
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/payments/%d", id))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(fill(a.k.PaymentJSON, "{id}", strconv.FormatInt(id, 10), "{amount}", strconv.FormatInt(p.Amount, 10))))
}

func (a *app) payout(w http.ResponseWriter, r *http.Request) {
	lease := pgidem.LeaseFrom(r)
	p, ok := parseBody(w, r)
	if !ok {
		return
	}
	bankRef, err := lease.DownstreamKey(r.Context(), "bank")
	if err != nil {
		pgidem.WriteError(w, err)
		return
	}
	if p.Heartbeat {
		if _, err := lease.Heartbeat(r.Context(), ""); err != nil { // by the route's lease
			pgidem.WriteError(w, err)
			return
		}
	}
	time.Sleep(time.Duration(p.SleepMs) * time.Millisecond) // the external call
	tx, err := lease.Begin(r.Context())
	if err != nil {
		pgidem.WriteError(w, err)
		return
	}
	var id int64
	err = tx.QueryRowContext(r.Context(), "INSERT INTO public.payouts (tenant, idem_key, amount, attempt) VALUES ($1, $2, $3, $4) RETURNING id",
		lease.Tenant(), lease.Key(), p.Amount, lease.Attempt()).Scan(&id)
	if err != nil {
		pgidem.WriteError(w, err)
		return
	}
	w.Header().Set("Location", fmt.Sprintf("/payouts/%d", id))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	_, _ = w.Write([]byte(fill(a.k.PayoutJSON, "{id}", strconv.FormatInt(id, 10), "{amount}", strconv.FormatInt(p.Amount, 10),
		"{attempt}", strconv.Itoa(lease.Attempt()), "{bank_ref}", bankRef)))
}
