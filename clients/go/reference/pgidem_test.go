package reference_test

// The database rules over real HTTP (httptest.Server listens on loopback) against a real
// PostgreSQL with pg_idem: PG_IDEM_HTTP_TEST_DSN (clients/go/test.sh starts one).

import (
	"bytes"
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"github.com/gorilla/mux"
	_ "github.com/lib/pq"

	pgidem "pg_idem/clients/go"
	"pg_idem/clients/go/reference"
)

func dsn(t *testing.T) string {
	d := os.Getenv("PG_IDEM_HTTP_TEST_DSN")
	if d == "" {
		t.Skip("PG_IDEM_HTTP_TEST_DSN names no database (clients/go/test.sh starts one)")
	}
	return d
}

func open(t *testing.T, d string) *sql.DB {
	db, err := sql.Open("postgres", d)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func fresh() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

type reply struct {
	status int
	header http.Header
	body   string
}

func post(t *testing.T, target, body, key, tenant string) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set("Idempotency-Key", key)
	}
	if tenant != "" {
		req.Header.Set("X-Tenant", tenant)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return reply{resp.StatusCode, resp.Header, string(b)}
}

type contractErrors map[string]struct {
	Status  int
	Message *string
}

func contractOf(t *testing.T) (errs contractErrors, min string) {
	var c struct {
		Errors contractErrors `json:"errors"`
		Min    string         `json:"min_pg_idem_version"`
	}
	if err := json.Unmarshal(pgidem.ContractJSON(), &c); err != nil {
		t.Fatal(err)
	}
	return c.Errors, c.Min
}

func errorBody(t *testing.T, name string) string {
	errs, _ := contractOf(t)
	b, _ := json.Marshal(map[string]string{"error": name, "message": *errs[name].Message})
	return string(bytes.Replace(b, []byte(`{"error":`), []byte(`{"error":`), 1))
}

// referenceApp is the reference app on loopback, and its counts.
func referenceApp(t *testing.T) (*httptest.Server, *pgidem.Idempotency, *sql.DB) {
	db := open(t, dsn(t))
	h, ix, err := reference.New(context.Background(), db)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, ix, db
}

func TestNewRefusesADatabaseWithoutPgIdemAndForeignFunctions(t *testing.T) {
	admin := open(t, dsn(t))
	name := "go_" + fresh()
	if _, err := admin.Exec("CREATE DATABASE " + name); err != nil {
		t.Fatal(err)
	}
	defer admin.Exec("DROP DATABASE " + name + " WITH (FORCE)")
	u, _ := url.Parse(dsn(t))
	u.Path = "/" + name
	db := open(t, u.String())
	opts := pgidem.Options{SingleTenant: "acme"}
	if _, err := pgidem.New(context.Background(), db, opts); err == nil || !strings.Contains(err.Error(), "not installed") {
		t.Fatalf("without pg_idem: %v", err)
	}
	for _, stmt := range []string{
		"CREATE EXTENSION pg_idem",
		"CREATE ROLE planter_" + name,
		"CREATE FUNCTION public.idem_planted(text) RETURNS text LANGUAGE sql AS 'SELECT $1'",
		"ALTER FUNCTION public.idem_planted(text) OWNER TO planter_" + name,
	} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(stmt, err)
		}
	}
	defer admin.Exec("DROP ROLE planter_" + name)
	defer db.Exec("DROP FUNCTION public.idem_planted(text)")
	// a new *sql.DB: the check runs once per pool
	again := open(t, u.String())
	_, err := pgidem.New(context.Background(), again, opts)
	if err == nil || !strings.Contains(err.Error(), "idem_planted(text)") {
		t.Fatalf("a planted function: %v", err)
	}
}

func TestNewRefusesAnOldPgIdemNamingBothVersions(t *testing.T) {
	db := open(t, dsn(t))
	schema := "Old Idem " + fresh() // quoted as an identifier
	quoted := `"` + schema + `"`
	for _, stmt := range []string{"CREATE SCHEMA " + quoted,
		"CREATE FUNCTION " + quoted + ".idem_version() RETURNS text LANGUAGE sql AS $$SELECT '0.4.9'$$"} {
		if _, err := db.Exec(stmt); err != nil {
			t.Fatal(err)
		}
	}
	defer db.Exec("DROP SCHEMA " + quoted + " CASCADE")
	_, min := contractOf(t)
	_, err := pgidem.New(context.Background(), db, pgidem.Options{SingleTenant: "a", Schema: schema})
	if err == nil || !strings.Contains(err.Error(), "0.4.9") || !strings.Contains(err.Error(), min) {
		t.Fatalf("an old version: %v", err)
	}
	// older still: no idem_version() at all (42883), and the message names the minimum
	if _, err := db.Exec("DROP FUNCTION " + quoted + ".idem_version()"); err != nil {
		t.Fatal(err)
	}
	_, err = pgidem.New(context.Background(), db, pgidem.Options{SingleTenant: "a", Schema: schema})
	if err == nil || !strings.Contains(err.Error(), "idem_version()") || !strings.Contains(err.Error(), min) {
		t.Fatalf("no idem_version(): %v", err)
	}
}

func TestATenantIsRequiredBeforeAnyClaim(t *testing.T) {
	srv, ix, _ := referenceApp(t)
	before := ix.Outcomes()["rejected"]
	r := post(t, srv.URL+"/payments", `{"amount":1}`, fresh(), "")
	if r.status != 400 || r.body != errorBody(t, "tenant_missing") {
		t.Fatalf("%+v", r)
	}
	if ix.Outcomes()["rejected"] != before+1 {
		t.Fatal("not counted as rejected")
	}
}

func TestHeadersReplayInOrderAndACookieNever(t *testing.T) {
	srv, _, _ := referenceApp(t)
	tenant, key := fresh(), fresh()
	body := `{"amount":5,"links":true,"set_cookie":true}`
	first := post(t, srv.URL+"/payments", body, key, tenant)
	again := post(t, srv.URL+"/payments", body, key, tenant)
	if first.status != 201 || again.status != 201 || first.body != again.body {
		t.Fatalf("%+v\n%+v", first, again)
	}
	if first.header.Get("Set-Cookie") == "" || again.header.Get("Set-Cookie") != "" {
		t.Fatalf("cookie: first %q, replay %q", first.header.Get("Set-Cookie"), again.header.Get("Set-Cookie"))
	}
	if links := again.header.Values("Link"); len(links) != 2 || strings.Join(links, "|") != strings.Join(first.header.Values("Link"), "|") {
		t.Fatalf("links: %q, replayed %q", first.header.Values("Link"), links)
	}
	if again.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Fatal("replay header")
	}
}

func TestTheFingerprintBindsTheTarget(t *testing.T) {
	srv, _, _ := referenceApp(t)
	tenant, key := fresh(), fresh()
	if r := post(t, srv.URL+"/orders/7/pay", `{"amount":5}`, key, tenant); r.status != 201 {
		t.Fatalf("%+v", r)
	}
	if r := post(t, srv.URL+"/orders/8/pay", `{"amount":5}`, key, tenant); r.status != 422 || r.body != errorBody(t, "mismatch") {
		t.Fatalf("another order: %+v", r)
	}
	key = fresh()
	post(t, srv.URL+"/payments?coupon=x", `{"amount":5}`, key, tenant)
	if r := post(t, srv.URL+"/payments?coupon=y", `{"amount":5}`, key, tenant); r.status != 422 {
		t.Fatalf("another query: %+v", r)
	}
	if r := post(t, srv.URL+"/payments?coupon=%78", `{"amount":5}`, key, tenant); r.status != 201 || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("the same target, escaped: %+v", r)
	}
}

func count(t *testing.T, db *sql.DB, tenant string) int {
	var n int
	if err := db.QueryRow("SELECT count(*) FROM public.payments WHERE tenant = $1", tenant).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func TestTheHandlerCannotEndTheTransaction(t *testing.T) {
	srv, ix, db := referenceApp(t)
	tenant := fresh()
	before := ix.Outcomes()
	// Tx.Commit refuses: the app panics, the insert rolls back, the retry runs
	key := fresh()
	if r := post(t, srv.URL+"/payments", `{"amount":5,"commit":"api"}`, key, tenant); r.status != 500 {
		t.Fatalf("commit api: %+v", r)
	}
	if count(t, db, tenant) != 0 || ix.Outcomes()["rolled_back"] != before["rolled_back"]+1 {
		t.Fatal("commit api: the insert stayed, or no rolled_back")
	}
	if r := post(t, srv.URL+"/payments", `{"amount":5}`, key, tenant); r.status != 422 && r.status != 201 {
		t.Fatalf("commit api, retry: %+v", r)
	}
	// COMMIT as SQL: the guard finds another transaction: 500, nothing stored
	key = fresh()
	if r := post(t, srv.URL+"/payments", `{"amount":5,"commit":"sql"}`, key, fresh()+tenant); r.status != 500 || r.body != errorBody(t, "internal_error") {
		t.Fatalf("commit sql: %+v", r)
	}
	if ix.Outcomes()["transaction_ended"] != before["transaction_ended"]+1 {
		t.Fatal("commit sql: not counted as transaction_ended")
	}
}

func TestInProgressCarriesRetryAfter(t *testing.T) {
	srv, _, _ := referenceApp(t)
	tenant, key := fresh(), fresh()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); post(t, srv.URL+"/payments", `{"amount":5,"sleep_ms":800}`, key, tenant) }()
	time.Sleep(300 * time.Millisecond)
	r := post(t, srv.URL+"/payments", `{"amount":5,"sleep_ms":800}`, key, tenant)
	wg.Wait()
	if r.status != 409 || r.header.Get("Retry-After") != "1" || r.body != errorBody(t, "in_progress") {
		t.Fatalf("%+v", r)
	}
}

// routes of one's own: gorilla/mux, a single tenant, an optional key, a fields fingerprint, a
// ttl the database refuses, a panic, a small body limit, and a lease.
func ownApp(t *testing.T, outcomes chan<- pgidem.Outcome) (*httptest.Server, *sql.DB) {
	db := open(t, dsn(t))
	ix, err := pgidem.New(context.Background(), db, pgidem.Options{SingleTenant: "single-" + fresh(),
		OnOutcome: func(o pgidem.Outcome) {
			if outcomes != nil {
				outcomes <- o
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS public.go_items (item text, body text)"); err != nil {
		t.Fatal(err)
	}
	insert := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tx := pgidem.TxFrom(r)
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO public.go_items VALUES ($1, $2)", mux.Vars(r)["id"], string(body)); err != nil {
			pgidem.WriteError(w, err)
			return
		}
		w.WriteHeader(201)
		_, _ = w.Write(body)
	}
	r := mux.NewRouter()
	r.Handle("/items/{id}", ix.Middleware(pgidem.Route{Template: "/items/{id}", Fields: []string{"amount"}, OptionalKey: true})(http.HandlerFunc(insert))).Methods("POST")
	r.Handle("/ttl", ix.Middleware(pgidem.Route{Template: "/ttl", TTL: "garbage"})(http.HandlerFunc(insert))).Methods("POST")
	r.Handle("/small", ix.Middleware(pgidem.Route{Template: "/small", MaxBodyBytes: 4})(http.HandlerFunc(insert))).Methods("POST")
	r.Handle("/panic", ix.Middleware(pgidem.Route{Template: "/panic"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		insert(httptest.NewRecorder(), r)
		panic("boom")
	}))).Methods("POST")
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	return srv, db
}

func items(t *testing.T, db *sql.DB, id string) int {
	var n int
	_ = db.QueryRow("SELECT count(*) FROM public.go_items WHERE item = $1", id).Scan(&n)
	return n
}

func TestGorillaFieldsOptionalKeyAndErrors(t *testing.T) {
	outcomes := make(chan pgidem.Outcome, 100)
	srv, db := ownApp(t, outcomes)
	id, key := fresh(), fresh()
	first := post(t, srv.URL+"/items/"+id, `{"amount":1,"note":"a"}`, key, "")
	same := post(t, srv.URL+"/items/"+id, `{ "note":"b",  "amount": 1 }`, key, "")
	other := post(t, srv.URL+"/items/"+id, `{"amount":2}`, key, "")
	if first.status != 201 || same.status != 201 || same.body != first.body || other.status != 422 {
		t.Fatalf("fields: %+v %+v %+v", first, same, other)
	}
	post(t, srv.URL+"/items/"+id, `{"amount":1}`, "", "")
	post(t, srv.URL+"/items/"+id, `{"amount":1}`, "", "")
	if n := items(t, db, id); n != 3 {
		t.Fatalf("optional key: %d rows, want 3 (one claimed, two without a key)", n)
	}
	if r := post(t, srv.URL+"/ttl", `{}`, fresh(), ""); r.status != 400 || !strings.Contains(r.body, `"error":"invalid_request"`) || !strings.Contains(r.body, "garbage") {
		t.Fatalf("a ttl the database refuses: %+v", r)
	}
	if r := post(t, srv.URL+"/small", `{"a":1}`, fresh(), ""); r.status != 413 || r.body != errorBody(t, "payload_too_large") {
		t.Fatalf("over the body limit: %+v", r)
	}
	pid := fresh()
	req, _ := http.NewRequest("POST", srv.URL+"/panic", strings.NewReader(pid))
	req.Header.Set("Idempotency-Key", fresh())
	if resp, err := http.DefaultClient.Do(req); err == nil { // net/http drops the connection
		resp.Body.Close()
	}
	if items(t, db, "") != 0 {
		t.Fatal("a panicking handler's insert stayed")
	}
	names := map[string]int{}
	for len(outcomes) > 0 {
		names[(<-outcomes).Name]++
	}
	// net/http's client sends a request with an Idempotency-Key again when its connection
	// broke: every attempt at /panic is claimed and rolled back
	panics := names["rolled_back"]
	for name, want := range map[string]int{"claimed": 1 + panics, "stored": 1, "replayed": 1, "mismatch": 1, "database_error": 1, "rejected": 1} {
		if names[name] != want {
			t.Errorf("outcome %s reported %d times, want %d (%v)", name, names[name], want, names)
		}
	}
}

func TestLeaseMode(t *testing.T) {
	db := open(t, dsn(t))
	ix, err := pgidem.New(context.Background(), db, pgidem.Options{SingleTenant: "lease-" + fresh()})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	refs := map[int]string{}   // by attempt
	phases := map[int]string{} // by attempt
	calls := map[string]int{}  // by key
	handler := func(w http.ResponseWriter, r *http.Request) {
		l := pgidem.LeaseFrom(r)
		ref, err := l.DownstreamKey(r.Context(), "bank")
		if err == nil {
			_, err = l.Heartbeat(r.Context(), "")
		}
		if err != nil {
			pgidem.WriteError(w, err)
			return
		}
		mu.Lock()
		refs[l.Attempt()], phases[l.Attempt()] = ref, l.CheckpointPhase()
		calls[l.Key()]++
		call := calls[l.Key()]
		mu.Unlock()
		switch {
		case r.URL.Query().Get("transient") != "" && call == 1:
			w.WriteHeader(503) // not final: released, the retry is claimed at once
			return
		case r.URL.Query().Get("slow") != "" && l.Attempt() == 1:
			if err := l.Checkpoint(r.Context(), "charged", map[string]int{"n": 1}); err != nil {
				pgidem.WriteError(w, err)
				return
			}
			time.Sleep(2500 * time.Millisecond) // the lease runs out; another attempt takes over
		}
		tx, err := l.Begin(r.Context())
		if err != nil {
			pgidem.WriteError(w, err)
			return
		}
		if tx.Commit() != pgidem.ErrTransactionOwned {
			t.Error("the completion transaction could be committed by the handler")
		}
		w.WriteHeader(201)
		_, _ = w.Write([]byte(ref))
	}
	r := chi.NewRouter()
	r.With(ix.Middleware(pgidem.Route{Template: "/payouts", Lease: "1 second"})).Post("/payouts", handler)
	srv := httptest.NewServer(r)
	defer srv.Close()

	key := fresh()
	if r := post(t, srv.URL+"/payouts?transient=1", `{}`, key, ""); r.status != 503 {
		t.Fatalf("%+v", r)
	}
	second := post(t, srv.URL+"/payouts?transient=1", `{}`, key, "")
	third := post(t, srv.URL+"/payouts?transient=1", `{}`, key, "")
	if second.status != 201 || third.body != second.body || third.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("%+v %+v", second, third)
	}
	if refs[1] == "" || second.body != refs[1] || calls[key] != 2 {
		t.Fatalf("downstream keys %q, %d calls", refs, calls[key])
	}

	// a takeover: the second attempt resumes from the checkpoint, the first loses its lease
	key = fresh()
	stale := make(chan reply, 1)
	go func() { stale <- post(t, srv.URL+"/payouts?slow=1", `{}`, key, "") }()
	time.Sleep(1500 * time.Millisecond)
	taken := post(t, srv.URL+"/payouts?slow=1", `{}`, key, "")
	lost := <-stale
	if taken.status != 201 || phases[2] != "charged" {
		t.Fatalf("takeover: %+v, phase %q", taken, phases[2])
	}
	if lost.status != 409 || !strings.Contains(lost.body, `"error":"lease_lost"`) || lost.header.Get("Retry-After") == "" {
		t.Fatalf("the stale attempt: %+v", lost)
	}
	if r := post(t, srv.URL+"/payouts?slow=1", `{}`, key, ""); r.body != taken.body || r.header.Get("Idempotent-Replayed") != "true" {
		t.Fatalf("after the takeover: %+v", r)
	}
}

// The target is the request line's: a prefix a router strips (http.StripPrefix, a mount) is
// still part of the request, so /v1/items and /v2/items are two requests for one key.
func TestTheTargetIsTheRequestLineNotTheRoutedPath(t *testing.T) {
	db := open(t, dsn(t))
	ix, err := pgidem.New(context.Background(), db, pgidem.Options{SingleTenant: "prefix-" + fresh()})
	if err != nil {
		t.Fatal(err)
	}
	h := ix.Middleware(pgidem.Route{Template: "/items"})(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(201)
	}))
	m := http.NewServeMux()
	m.Handle("/v1/", http.StripPrefix("/v1", h))
	m.Handle("/v2/", http.StripPrefix("/v2", h))
	srv := httptest.NewServer(m)
	defer srv.Close()
	key := fresh()
	if r := post(t, srv.URL+"/v1/items", `{}`, key, ""); r.status != 201 {
		t.Fatalf("%+v", r)
	}
	if r := post(t, srv.URL+"/v2/items", `{}`, key, ""); r.status != 422 {
		t.Fatalf("another prefix, the same key: %+v", r)
	}
}

// Bring your own transaction: Claim, the work, Complete, COMMIT, answer; WriteAnswer replays.
func TestClaimAndCompleteInYourOwnTransaction(t *testing.T) {
	db := open(t, dsn(t))
	ix, err := pgidem.New(context.Background(), db, pgidem.Options{SingleTenant: "own-" + fresh()})
	if err != nil {
		t.Fatal(err)
	}
	route := pgidem.Route{Template: "/own"}
	handler := func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		tx, err := db.BeginTx(r.Context(), nil)
		if err != nil {
			pgidem.WriteError(w, err)
			return
		}
		defer tx.Rollback()
		claimed, err := ix.Claim(r.Context(), tx, route, r, "acme", body)
		if err != nil {
			pgidem.WriteError(w, err)
			return
		}
		if claimed.Outcome != "claimed" {
			claimed.WriteAnswer(w)
			return
		}
		if _, err := tx.ExecContext(r.Context(), "INSERT INTO public.go_items VALUES ($1, $2)", claimed.ScopedKey, string(body)); err != nil {
			pgidem.WriteError(w, err)
			return
		}
		if r.URL.Query().Get("commit") != "" {
			_, _ = tx.ExecContext(r.Context(), "COMMIT")
		}
		header := http.Header{"Content-Type": {"text/plain"}}
		answer := []byte("made " + claimed.ScopedKey)
		if err := ix.Complete(r.Context(), tx, claimed, 201, header, answer); err != nil {
			pgidem.WriteError(w, err)
			return
		}
		if err := tx.Commit(); err != nil {
			pgidem.WriteError(w, err)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		w.WriteHeader(201)
		_, _ = w.Write(answer)
	}
	srv := httptest.NewServer(http.HandlerFunc(handler))
	defer srv.Close()
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS public.go_items (item text, body text)"); err != nil {
		t.Fatal(err)
	}
	key := fresh()
	first := post(t, srv.URL+"/own", `{"a":1}`, key, "")
	again := post(t, srv.URL+"/own", `{"a":1}`, key, "")
	other := post(t, srv.URL+"/own", `{"a":2}`, key, "")
	if first.status != 201 || again.body != first.body || again.header.Get("Idempotent-Replayed") != "true" || other.status != 422 {
		t.Fatalf("%+v\n%+v\n%+v", first, again, other)
	}
	if r := post(t, srv.URL+"/own", `{}`, "", ""); r.status != 400 || r.body != errorBody(t, "key_missing") {
		t.Fatalf("no key: %+v", r)
	}
	if r := post(t, srv.URL+"/own?commit=1", `{}`, fresh(), ""); r.status != 500 || ix.Outcomes()["transaction_ended"] != 1 {
		t.Fatalf("COMMIT as SQL: %+v %v", r, ix.Outcomes())
	}
}

// vectors.fingerprint_body against the server, with the statement text the package embeds: its
// parameters ($2 method, $5 body, $10 target) renumbered, as no other parameter is sent.
func TestTheBodyFingerprintMatchesTheVectors(t *testing.T) {
	db := open(t, dsn(t))
	var c struct {
		SQL     map[string]string `json:"sql"`
		Vectors struct {
			FingerprintBody []struct {
				Method, Target, Fingerprint string
				BodyBase64                  string `json:"body_base64"`
			} `json:"fingerprint_body"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(pgidem.ContractJSON(), &c); err != nil {
		t.Fatal(err)
	}
	renumber := map[string]string{"$2": "$1", "$5": "$2", "$10": "$3"}
	expr := regexp.MustCompile(`\$\d+`).ReplaceAllStringFunc(c.SQL["fingerprint_body"], func(p string) string {
		if n, ok := renumber[p]; ok {
			return n
		}
		t.Fatalf("fingerprint_body names %s", p)
		return p
	})
	if len(c.Vectors.FingerprintBody) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range c.Vectors.FingerprintBody {
		body, _ := base64.StdEncoding.DecodeString(v.BodyBase64)
		var got string
		if err := db.QueryRow("SELECT "+expr, v.Method, body, v.Target).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != v.Fingerprint {
			t.Errorf("%s %s: %s, want %s", v.Method, v.Target, got, v.Fingerprint)
		}
	}
}
