package pgidem

import (
	"bytes"
	"errors"
	"net/http"
)

// buffer holds the handler's response until the transaction is committed.
type buffer struct {
	header  http.Header
	status  int
	body    bytes.Buffer
	errName string // set by WriteError: an error response is never stored
}

func newBuffer() *buffer { return &buffer{header: http.Header{}} }

func (b *buffer) Header() http.Header { return b.header }

func (b *buffer) WriteHeader(status int) {
	if b.status == 0 {
		b.status = status
	}
}

func (b *buffer) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.status = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *buffer) statusCode() int {
	if b.status == 0 {
		return http.StatusOK
	}
	return b.status
}

// settle does what net/http would do when the response is written, so that what is stored is
// what the client got: a body without a Content-Type gets the sniffed one.
func (b *buffer) settle() {
	if _, ok := b.header["Content-Type"]; !ok && b.body.Len() > 0 {
		b.header.Set("Content-Type", http.DetectContentType(b.body.Bytes()))
	}
}

func (b *buffer) sendTo(w http.ResponseWriter) {
	h := w.Header()
	for name, values := range b.header {
		h[name] = values
	}
	w.WriteHeader(b.statusCode())
	_, _ = w.Write(b.body.Bytes())
}

// WriteError answers err as the contract's error body: a *Error as it is (lease_lost from
// Lease.Begin, ...), a database error by its SQLSTATE, anything else as internal_error. Such a
// response is never stored, whatever its status: the transaction it came from is rolled back.
func WriteError(w http.ResponseWriter, err error) {
	var e *Error
	if !errors.As(err, &e) {
		e = fromDB(err, contract.Defaults.RetryAfterSeconds)
	}
	if b, ok := w.(*buffer); ok {
		b.errName = e.Name
	}
	writeError(w, e)
}
