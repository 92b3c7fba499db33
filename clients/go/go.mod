// SPDX-License-Identifier: PostgreSQL (the repository's LICENSE)
module pg_idem/clients/go

go 1.19
