-- language: sql
SELECT idem.new_uuid_v7()
