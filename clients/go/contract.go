package pgidem

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"strings"
)

// contractJSON is a byte-identical copy of clients/contract.json (clients/sync-contract.sh
// writes it; TestContractIsTheSourcesCopy fails when it differs). Every fact comes from it.
//
//go:embed contract.json
var contractJSON []byte

type contractFile struct {
	Defaults struct {
		KeyHeader                  string   `json:"key_header"`
		ReplayHeader               string   `json:"replay_header"`
		ReplayHeaderValue          string   `json:"replay_header_value"`
		StoredHeaders              []string `json:"stored_headers"`
		NeverStoredHeaders         []string `json:"never_stored_headers"`
		MaxKeyLength               int      `json:"max_key_length"`
		MaxBodyBytes               int64    `json:"max_body_bytes"`
		RetryAfterSeconds          int      `json:"retry_after_seconds"`
		StatementTimeoutMs         int64    `json:"statement_timeout_ms"`
		IdleInTransactionTimeoutMs int64    `json:"idle_in_transaction_timeout_ms"`
		FinalStatus                struct {
			From   int   `json:"from"`
			To     int   `json:"to"`
			Except []int `json:"except"`
		} `json:"final_status"`
	} `json:"defaults"`
	Errors map[string]struct {
		Status     int     `json:"status"`
		Message    *string `json:"message"`
		RetryAfter bool    `json:"retry_after"`
	} `json:"errors"`
	SQLStates        [][2]string       `json:"sqlstates"`
	SQL              map[string]string `json:"sql"`
	MinPgIdemVersion string            `json:"min_pg_idem_version"`
	Outcomes         []string          `json:"outcomes"`
	ReferenceApp     json.RawMessage   `json:"reference_app"`
}

var contract = mustParseContract()

func mustParseContract() *contractFile {
	var c contractFile
	if err := json.Unmarshal(contractJSON, &c); err != nil {
		panic(fmt.Sprintf("pgidem: the embedded contract.json does not parse: %v", err))
	}
	return &c
}

// ContractJSON returns the embedded contract.json (the reference app reads its constants).
func ContractJSON() []byte { return append([]byte(nil), contractJSON...) }

// statement returns contract SQL `name` with {schema} (and {fingerprint}) put in place.
func statement(name, schema string, fields bool) string {
	s := contract.SQL[name]
	if name == "claim" {
		fp := contract.SQL["fingerprint_body"]
		if fields {
			fp = contract.SQL["fingerprint_fields"]
		}
		s = strings.ReplaceAll(s, "{fingerprint}", fp)
	}
	return strings.ReplaceAll(s, "{schema}", schema)
}

func isFinal(status int) bool {
	f := contract.Defaults.FinalStatus
	if status < f.From || status > f.To {
		return false
	}
	for _, s := range f.Except {
		if s == status {
			return false
		}
	}
	return true
}

func neverStored(lowerName string) bool {
	for _, n := range contract.Defaults.NeverStoredHeaders {
		if n == lowerName {
			return true
		}
	}
	return false
}
