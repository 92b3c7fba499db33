package pgidem

import (
	"bytes"
	"context"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"strconv"
	"strings"
)

// Error is one of the contract's errors, answered as its JSON body.
type Error struct {
	Name    string // a name of contract.json's "errors"
	Message string
	Status  int
	// RetryAfter is the Retry-After seconds of an error that carries one (0: none).
	RetryAfter int
	cause      error
}

func (e *Error) Error() string {
	if e.cause != nil {
		return e.Name + ": " + e.cause.Error()
	}
	return e.Name + ": " + e.Message
}

func (e *Error) Unwrap() error { return e.cause }

// newError is the contract's error `name` with its fixed message.
func newError(name string, retryAfter int) *Error {
	def := contract.Errors[name]
	e := &Error{Name: name, Status: def.Status}
	if def.Message != nil {
		e.Message = *def.Message
	}
	if def.RetryAfter {
		e.RetryAfter = retryAfter
	}
	return e
}

// sqlStater is what lib/pq's *pq.Error and pgx's *pgconn.PgError both provide.
type sqlStater interface{ SQLState() string }

// fromDB maps a database error by its SQLSTATE (the first prefix of `sqlstates` that matches);
// a lost connection without one is `unavailable`, anything else `internal_error`.
func fromDB(err error, retryAfter int) *Error {
	var known *Error
	if errors.As(err, &known) {
		return known
	}
	var st sqlStater
	if errors.As(err, &st) {
		code := st.SQLState()
		for _, pair := range contract.SQLStates {
			if strings.HasPrefix(code, pair[0]) {
				e := newError(pair[1], retryAfter)
				if e.Message == "" {
					e.Message = dbMessage(err)
				}
				e.cause = err
				return e
			}
		}
	} else {
		var netErr net.Error
		if errors.Is(err, driver.ErrBadConn) || errors.As(err, &netErr) || errors.Is(err, context.DeadlineExceeded) {
			e := newError("unavailable", retryAfter)
			e.cause = err
			return e
		}
	}
	e := newError("internal_error", retryAfter)
	e.cause = err
	return e
}

// dbMessage is the database's own message: the error text without the driver's "pq: " or
// pgx's " (SQLSTATE 22023)" decorations.
func dbMessage(err error) string {
	msg := err.Error()
	msg = strings.TrimPrefix(msg, "pq: ")
	msg = strings.TrimPrefix(msg, "ERROR: ")
	if i := strings.LastIndex(msg, " (SQLSTATE "); i >= 0 {
		msg = msg[:i]
	}
	return msg
}

// errorBody is {"error":"<name>","message":"<message>"}, compact, in that order.
func errorBody(name, message string) []byte {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(struct {
		Error   string `json:"error"`
		Message string `json:"message"`
	}{name, message})
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n"))
}

func writeError(w http.ResponseWriter, e *Error) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if e.RetryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(e.RetryAfter))
	}
	w.WriteHeader(e.Status)
	_, _ = w.Write(errorBody(e.Name, e.Message))
}
