// Command pg-idem-reference is the reference app of pg_idem's Go package, started as
// clients/apps.json lists it: pg-idem-reference --dsn postgresql://... --port 8000
package main

import (
	"context"
	"database/sql"
	"flag"
	"log"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/lib/pq"

	"pg_idem/clients/go/reference"
)

func main() {
	dsn := flag.String("dsn", "", "PostgreSQL URI")
	port := flag.Int("port", 8000, "port on 127.0.0.1")
	flag.Parse()
	db, err := open(*dsn)
	if err != nil {
		log.Fatal(err)
	}
	db.SetMaxOpenConns(40)
	db.SetMaxIdleConns(10)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	handler, _, err := reference.New(ctx, db)
	cancel()
	if err != nil {
		log.Fatal(err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(*port))
	log.Printf("pg-idem-reference listening on %s", addr)
	log.Fatal((&http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 10 * time.Second}).ListenAndServe())
}

// open connects as libpq's default sslmode=prefer would, which lib/pq lacks: TLS when the server
// offers it, else plain (the conformance servers listen on loopback without TLS).
func open(dsn string) (*sql.DB, error) {
	db, err := sql.Open("postgres", dsn)
	if err != nil {
		return nil, err
	}
	u, perr := url.Parse(dsn)
	if perr != nil || u.Query().Get("sslmode") != "" {
		return db, nil
	}
	if err = db.Ping(); err != pq.ErrSSLNotSupported {
		return db, nil
	}
	_ = db.Close()
	q := u.Query()
	q.Set("sslmode", "disable")
	u.RawQuery = q.Encode()
	return sql.Open("postgres", u.String())
}
