module pg_idem/clients/go

go 1.19
