-- language: sql
SELECT idem.request_hash_of_body(body)
