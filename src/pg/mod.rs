//! PostgreSQL integration, no policy: rows through the table and index access methods (`heap`),
//! datums (`datum`), pg_idem's advisory locks (`locks`), SQL through SPI as the extension's owner (`sql`, `owner`), the settings
//! (`guc`), the clock (`time`), Citus (`cluster`), whether shared memory exists (`preload`),
//! and the calls that differ between PostgreSQL versions (`pg_version`).

pub mod caches;
pub mod cluster;
pub mod datum;
pub mod guc;
pub mod heap;
pub mod locks;
pub mod owner;
pub mod pg_version;
pub mod preload;
pub mod sql;
pub mod time;
