package main

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"

	"github.com/go-chi/chi/v5"
	_ "github.com/lib/pq"

	pgidem "pg_idem/clients/go"
)

func main() {
	db, err := sql.Open("postgres", os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	// refuses to start where pg_idem is missing, too old, or has look-alike functions beside it
	idem, err := pgidem.New(context.Background(), db, pgidem.Options{
		// your auth's account of the caller: never a value the client may choose freely
		Tenant: func(r *http.Request) string { return r.Header.Get("X-Tenant") },
	})
	if err != nil {
		log.Fatal(err)
	}

	r := chi.NewRouter()
	r.With(idem.Middleware(pgidem.Route{Template: "/payments"})).Post("/payments", pay)
	log.Fatal(http.ListenAndServe("127.0.0.1:"+os.Getenv("PORT"), r))
}

func pay(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Amount int64 `json:"amount"`
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, "the body is not JSON", http.StatusBadRequest)
		return
	}
	tx := pgidem.TxFrom(r) // the claim's transaction: write in it, never end it
	var id int64
	err := tx.QueryRowContext(r.Context(), "INSERT INTO payments (tenant, amount) VALUES ($1, $2) RETURNING id",
		tx.Tenant(), body.Amount).Scan(&id)
	if err != nil {
		pgidem.WriteError(w, err) // the contract's error body; nothing is stored
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, `{"id":%d,"amount":%d}`, id, body.Amount)
}
