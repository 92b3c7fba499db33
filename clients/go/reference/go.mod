// SPDX-License-Identifier: PostgreSQL (the repository's LICENSE)
module pg_idem/clients/go/reference

go 1.19

require (
	github.com/go-chi/chi/v5 v5.0.7
	github.com/gorilla/mux v1.8.0
	github.com/lib/pq v1.10.7
	pg_idem/clients/go v0.0.0
)

replace pg_idem/clients/go => ../
