package pgidem

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
)

// vectors is contract.json's "vectors", read from the package's own copy.
var vectors struct {
	KeyHeader []struct {
		Header string
		Key    *string
	} `json:"key_header"`
	RequestTarget []struct{ Received, Target string } `json:"request_target"`
	FinalStatus   []struct {
		Status int
		Final  bool
	} `json:"final_status"`
	Envelope []struct {
		Status        int
		StoredHeaders []string   `json:"stored_headers"`
		Headers       [][]string `json:"headers"`
		BodyBase64    string     `json:"body_base64"`
		Envelope      json.RawMessage
	} `json:"envelope"`
	LegacyReplay []struct {
		ResponseBody *string `json:"response_body"`
		ContentType  *string `json:"content_type"`
		Body         string
	} `json:"legacy_replay"`
	Replay []struct {
		About        string
		ResponseBody string     `json:"response_body"`
		Headers      [][]string `json:"headers"`
		BodyBase64   string     `json:"body_base64"`
	} `json:"replay"`
	Version []struct {
		Installed string
		OK        bool
	} `json:"version"`
}

func init() {
	var c struct{ Vectors json.RawMessage }
	if err := json.Unmarshal(contractJSON, &c); err != nil {
		panic(err)
	}
	if err := json.Unmarshal(c.Vectors, &vectors); err != nil {
		panic(err)
	}
}

func TestContractIsTheSourcesCopy(t *testing.T) {
	source, err := os.ReadFile("../contract.json")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(source, contractJSON) {
		t.Fatal("clients/go/contract.json differs from clients/contract.json: run clients/sync-contract.sh")
	}
}

func TestKeyHeaderVectors(t *testing.T) {
	for _, v := range vectors.KeyHeader {
		key, ok := parseKey(v.Header)
		if v.Key == nil {
			if ok {
				t.Errorf("parseKey(%q) = %q, want invalid", v.Header, key)
			}
		} else if !ok || key != *v.Key {
			t.Errorf("parseKey(%q) = %q, %v; want %q", v.Header, key, ok, *v.Key)
		}
	}
}

func TestRequestTargetVectors(t *testing.T) {
	for _, v := range vectors.RequestTarget {
		if got := normalizeTarget(v.Received); got != v.Target {
			t.Errorf("normalizeTarget(%q) = %q, want %q", v.Received, got, v.Target)
		}
	}
}

// The target is what the request line said, through net/http's own parsing.
func TestRequestTargetOfARealRequest(t *testing.T) {
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got <- requestTarget(r) }))
	defer srv.Close()
	for _, v := range vectors.RequestTarget {
		if strings.ContainsAny(v.Received, " \"<>") || strings.ContainsRune(v.Received, 'é') {
			continue // not sendable on a request line as it is
		}
		resp, err := http.Post(srv.URL+v.Received, "text/plain", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if g := <-got; g != v.Target {
			t.Errorf("request to %q: target %q, want %q", v.Received, g, v.Target)
		}
	}
}

func TestFinalStatusVectors(t *testing.T) {
	for _, v := range vectors.FinalStatus {
		if isFinal(v.Status) != v.Final {
			t.Errorf("isFinal(%d) = %v", v.Status, !v.Final)
		}
	}
}

func TestEnvelopeVectors(t *testing.T) {
	for i, v := range vectors.Envelope {
		stored := contract.Defaults.StoredHeaders
		if v.StoredHeaders != nil {
			stored = v.StoredHeaders
		}
		header := http.Header{}
		for _, h := range v.Headers {
			header.Add(h[0], h[1])
		}
		body, _ := base64.StdEncoding.DecodeString(v.BodyBase64)
		got, err := envelope(stored, header, body)
		if err != nil {
			t.Fatal(err)
		}
		var want, have interface{}
		_ = json.Unmarshal(v.Envelope, &want)
		_ = json.Unmarshal(got, &have)
		if !reflect.DeepEqual(want, have) {
			t.Errorf("envelope %d: %s, want %s", i, got, v.Envelope)
		}
		// replay is the inverse: the stored headers in order, the body's bytes
		text := string(got)
		lines, replayed, err := replay(&text)
		if err != nil || !bytes.Equal(replayed, body) {
			t.Errorf("envelope %d replays %q, %v", i, replayed, err)
		}
		for _, l := range lines {
			if !contains(stored, l.name) || neverStored(l.name) {
				t.Errorf("envelope %d replays header %q", i, l.name)
			}
		}
	}
}

func TestReplayVectors(t *testing.T) {
	for _, v := range vectors.Replay {
		body := v.ResponseBody
		lines, got, err := replay(&body)
		if err != nil {
			t.Fatalf("%s: %v", v.About, err)
		}
		want, _ := base64.StdEncoding.DecodeString(v.BodyBase64)
		if !bytes.Equal(got, want) {
			t.Errorf("%s: body %q, want %q", v.About, got, want)
		}
		var have [][]string
		for _, l := range lines {
			have = append(have, []string{l.name, l.value})
		}
		if !reflect.DeepEqual(have, v.Headers) && !(len(have) == 0 && len(v.Headers) == 0) {
			t.Errorf("%s: headers %q, want %q", v.About, have, v.Headers)
		}
	}
}

func TestLegacyReplayVectors(t *testing.T) {
	for _, v := range vectors.LegacyReplay {
		lines, body, err := replay(v.ResponseBody)
		if err != nil || string(body) != v.Body {
			t.Errorf("legacy %v: body %q, %v", v.ResponseBody, body, err)
		}
		var ct *string
		for _, l := range lines {
			if l.name == "content-type" {
				value := l.value
				ct = &value
			}
		}
		if (ct == nil) != (v.ContentType == nil) || ct != nil && *ct != *v.ContentType {
			t.Errorf("legacy %v: content-type %v", v.ResponseBody, ct)
		}
	}
}

func TestAnUnknownEnvelopeVersionIsAnError(t *testing.T) {
	body := `{"http": 3, "headers": {}, "body": ""}`
	if _, _, err := replay(&body); err == nil {
		t.Fatal("http 3 replayed")
	}
}

func TestVersionVectors(t *testing.T) {
	for _, v := range vectors.Version {
		if versionAtLeast(v.Installed, contract.MinPgIdemVersion) != v.OK {
			t.Errorf("version %q: ok should be %v", v.Installed, v.OK)
		}
	}
}

func TestSQLStatesMapInOrder(t *testing.T) {
	for _, pair := range contract.SQLStates {
		code := pair[0] + strings.Repeat("0", 5-len(pair[0]))
		if code == "22000" || code == "57P00" || code == "08000" { // a prefix: any code of its class
			code = pair[0] + "X" + strings.Repeat("9", 4-len(pair[0]))
		}
		e := fromDB(stateErr(code), 3)
		if e.Name != pair[1] || e.Status != contract.Errors[pair[1]].Status {
			t.Errorf("SQLSTATE %s maps to %s, want %s", code, e.Name, pair[1])
		}
		if contract.Errors[pair[1]].RetryAfter != (e.RetryAfter == 3) {
			t.Errorf("SQLSTATE %s: Retry-After %d", code, e.RetryAfter)
		}
	}
	if e := fromDB(stateErr("23505"), 1); e.Name != "internal_error" {
		t.Errorf("23505 maps to %s", e.Name)
	}
	if e := fromDB(stateErr("22023"), 1); e.Message != "the db said so" {
		t.Errorf("invalid_request carries %q, not the database's message", e.Message)
	}
}

type stateErr string

func (s stateErr) Error() string    { return "pq: the db said so" }
func (s stateErr) SQLState() string { return string(s) }

func TestErrorBodyIsCompactAndInOrder(t *testing.T) {
	got := string(errorBody("invalid_request", `a "quoted" <arg> & é`))
	want := `{"error":"invalid_request","message":"a \"quoted\" <arg> & é"}`
	if got != want {
		t.Fatalf("%s, want %s", got, want)
	}
}

func TestQuoteIdent(t *testing.T) {
	for in, want := range map[string]string{"public": "public", "_x1": "_x1", "Idem": `"Idem"`,
		"1x": `"1x"`, `a"b`: `"a""b"`, "my schema": `"my schema"`} {
		if got := quoteIdent(in); got != want {
			t.Errorf("quoteIdent(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestTextArrayLiteral(t *testing.T) {
	if got := textArray([]string{"amount", `a"b\c`}); got != `{"amount","a\"b\\c"}` {
		t.Fatal(got)
	}
}

func TestEveryStatementNamesTheSchema(t *testing.T) {
	for name := range contract.SQL {
		s := statement(name, `"the schema"`, false)
		if strings.Contains(s, "{schema}") || strings.Contains(s, "{fingerprint}") {
			t.Errorf("%s keeps a placeholder", name)
		}
	}
	// every parameter sent must be named: an unreferenced one has no type, and database/sql's
	// drivers let the server infer the types
	if body := statement("claim", "s", false); strings.Contains(body, "$11") || !strings.Contains(body, "$10") {
		t.Error("the body-mode claim names $11, or not $10")
	}
	if fields := statement("claim", "s", true); !strings.Contains(fields, "$11") {
		t.Error("the fields-mode claim does not name $11")
	}
}

func TestConfigurationIsRefusedBeforeTheDatabase(t *testing.T) {
	tenant := func(*http.Request) string { return "t" }
	for name, opts := range map[string]Options{
		"no tenant":      {},
		"both tenants":   {Tenant: tenant, SingleTenant: "acme"},
		"a cookie":       {SingleTenant: "acme", StoredHeaders: []string{"Content-Type", "Set-Cookie"}},
		"authorization":  {SingleTenant: "acme", StoredHeaders: []string{"AUTHORIZATION"}},
		"content-length": {SingleTenant: "acme", StoredHeaders: []string{"content-length"}},
	} {
		// a nil *sql.DB: the refusal must come before any use of it
		if _, err := New(context.Background(), nil, opts); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	for _, never := range contract.Defaults.NeverStoredHeaders {
		if _, err := New(context.Background(), nil, Options{SingleTenant: "a", StoredHeaders: []string{never}}); err == nil {
			t.Errorf("StoredHeaders %q accepted", never)
		}
	}
}

func TestOutcomesHaveEveryName(t *testing.T) {
	ix := &Idempotency{counts: newCounters(), onOutcome: func(Outcome) {}}
	ix.report(Outcome{Name: "stored"})
	got := ix.Outcomes()
	if len(got) != len(contract.Outcomes) || got["stored"] != 1 || got["claimed"] != 0 {
		t.Fatal(got)
	}
}
