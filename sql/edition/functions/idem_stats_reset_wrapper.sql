-- language: sql
-- as the native edition without shared_preload_libraries: there are no counters to reset
SELECT false
