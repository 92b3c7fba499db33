//! Every error pg_idem raises: one SQLSTATE per kind, a message naming the argument or key, a
//! detail and a hint. Nothing a caller passes may end in a Rust panic (which would be XX000).

use pgrx::pg_sys::panic::ErrorReport;
use pgrx::{PgLogLevel, PgSqlErrorCode};

/// An error on its way to the client. Build it with one of the constructors below, then `raise()`.
#[derive(Debug)]
pub struct IdemError {
    code: PgSqlErrorCode,
    message: String,
    detail: String,
    hint: String,
}

impl IdemError {
    fn new(code: PgSqlErrorCode, message: String, detail: String, hint: impl Into<String>) -> Self {
        IdemError {
            code,
            message,
            detail,
            hint: hint.into(),
        }
    }

    /// Aborts the current statement with this error (the transaction rolls back as usual).
    pub fn raise(self) -> ! {
        ErrorReport::new(self.code, self.message, "pg_idem")
            .set_detail(self.detail)
            .set_hint(self.hint)
            .report(PgLogLevel::ERROR);
        unreachable!("ERROR does not return")
    }
}

impl IdemError {
    /// Reports this as a WARNING and goes on.
    pub fn warn(self) {
        ErrorReport::new(self.code, self.message, "pg_idem")
            .set_detail(self.detail)
            .set_hint(self.hint)
            .report(PgLogLevel::WARNING);
    }
}

/// 08006 (as a warning): a Citus node did not run what the coordinator sent it.
pub fn node_failed(function: &str, node: &str, why: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_CONNECTION_FAILURE,
        format!("{function}: node {node} did not purge its shards"),
        format!("Citus reported: {why}"),
        "The other nodes were purged. The node's own purge worker purges its shards once it is back; or call idem_purge() again then.",
    )
}

/// 22004: a required argument is NULL.
pub fn null_argument(argument: &str, hint: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_NULL_VALUE_NOT_ALLOWED,
        format!("argument \"{argument}\" must not be null"),
        format!("pg_idem cannot act on a NULL {argument}."),
        hint,
    )
}

/// 22023: an argument is out of its allowed range or shape.
pub fn invalid_argument(argument: &str, problem: &str, detail: String, hint: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
        format!("argument \"{argument}\" {problem}"),
        detail,
        hint,
    )
}

/// 54000: an argument is larger than a configured limit.
pub fn too_large(argument: &str, detail: String, hint: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        format!("argument \"{argument}\" is too large"),
        detail,
        hint,
    )
}

/// Why an operation under a fence was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseLost {
    /// The key is in progress under another fence. Whether the caller's fence is older (taken
    /// over) or was never the key's is not said: a direction would let a caller that guesses
    /// fences find the live one by bisection.
    NotHolder,
    /// The key already holds a completed response.
    Completed,
    /// The key already holds a final error.
    Failed,
}

/// 55000: the caller's fence no longer owns the key. Its transaction must roll back.
pub fn lease_lost(
    function: &str,
    tenant: &str,
    key: &str,
    fence: i64,
    why: LeaseLost,
) -> IdemError {
    let detail = match why {
        LeaseLost::NotHolder => format!(
            "Fence {fence} does not hold this key: another attempt holds it (after a takeover or a new claim), or it never was this key's fence."
        ),
        LeaseLost::Completed => {
            format!("The key is already completed; fence {fence} cannot change it.")
        }
        LeaseLost::Failed => {
            format!("The key already holds a final error; fence {fence} cannot change it.")
        }
    };
    IdemError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("{function}: lease lost on key \"{key}\" of tenant \"{tenant}\""),
        detail,
        "Stop this attempt and roll back its transaction; the attempt that holds the key now, or the stored response, is authoritative.",
    )
}

/// P0002: the key does not exist (never claimed, released, forgotten or purged).
pub fn key_not_found(function: &str, tenant: &str, key: &str, fence: i64) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_NO_DATA_FOUND,
        format!("{function}: key \"{key}\" of tenant \"{tenant}\" does not exist"),
        format!("No key holds fence {fence}: it was never claimed, or it was released, forgotten or purged since."),
        "Claim the key with idem_claim() first; a released or purged key must be claimed again.",
    )
}

/// 54000: more databases with pg_idem draw fences at once than the fence clock keeps floors for.
pub fn too_many_fence_databases(slots: usize) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_PROGRAM_LIMIT_EXCEEDED,
        "pg_idem cannot draw a fence for this database".to_string(),
        format!("Fences of at most {slots} existing databases with pg_idem are kept apart in one server lifetime (dropped databases free theirs)."),
        "Drop databases with pg_idem that are no longer used, or restart the server.",
    )
}

/// 55000: a DBA changed one of pg_idem's own columns of idem.keys; nothing is read or written
/// until the change is undone (`store::definition`).
pub fn keys_table_changed(difference: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        "idem.keys is not the table pg_idem created".to_string(),
        difference.to_string(),
        "Undo the change with ALTER TABLE idem.keys (pg_idem's own columns must keep the type, collation and NOT NULL that CREATE EXTENSION gave them). Columns of your own, defaults, triggers and rules are allowed: docs/maintenance.md, Changing idem.keys.",
    )
}

/// 55000: a table of pg_idem's was changed so that pg_idem cannot read it.
pub fn table_changed(relid: pgrx::pg_sys::Oid, difference: String) -> IdemError {
    // SAFETY: get_rel_name returns a palloc'd name, or NULL for a relation that is gone.
    let name = unsafe {
        let name = pgrx::pg_sys::get_rel_name(relid);
        if name.is_null() {
            format!("{}", relid.to_u32())
        } else {
            std::ffi::CStr::from_ptr(name)
                .to_string_lossy()
                .into_owned()
        }
    };
    IdemError::new(
        PgSqlErrorCode::ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE,
        format!("idem.{name} is not the table pg_idem created"),
        difference,
        "Undo the change with ALTER TABLE: pg_idem's own columns must keep the type, collation and NOT NULL that CREATE EXTENSION gave them.",
    )
}

/// 55P03: idem_consume of a key an attempt of idem_claim holds: whether its effect happens is
/// not known yet, so the message may be neither processed nor acknowledged now.
pub fn consume_in_progress(
    function: &str,
    tenant: &str,
    key: &str,
    lease_expires_at: Option<pgrx::datum::TimestampWithTimeZone>,
    mine: bool,
) -> IdemError {
    let detail = if mine {
        "This transaction claimed it with idem_claim and has not completed it.".to_string()
    } else {
        match lease_expires_at {
            Some(lease) => {
                format!("An attempt claimed it with idem_claim; its lease runs until {lease}.")
            }
            None => "An attempt claimed it with idem_claim.".to_string(),
        }
    };
    IdemError::new(
        PgSqlErrorCode::ERRCODE_LOCK_NOT_AVAILABLE,
        format!("{function}: key \"{key}\" of tenant \"{tenant}\" is held by an attempt in progress"),
        detail,
        "Do not acknowledge the message: let it be redelivered later (once the lease has passed, idem_consume takes the key over), or finish the attempt with idem_complete.",
    )
}

/// 42501: pg_idem.tenant_grants is on and the role has no grant on the tenant.
pub fn tenant_denied(tenant: &str, role: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_INSUFFICIENT_PRIVILEGE,
        format!("permission denied for tenant \"{tenant}\""),
        format!("Role \"{role}\" has no grant on tenant \"{tenant}\" (directly or through a role it has the privileges of), and pg_idem.tenant_grants is on."),
        "A superuser grants the tenant with idem_grant_tenant(role, tenant); SET ROLE to a role that has the grant also works.",
    )
}

/// 40001: at REPEATABLE READ or SERIALIZABLE, a key the call must write was changed by a
/// transaction that committed after this transaction's snapshot (as the executor reports it).
pub fn serialization_failure(function: &str, tenant: &str, key: &str) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_T_R_SERIALIZATION_FAILURE,
        "could not serialize access due to concurrent update".to_string(),
        format!("{function}: key \"{key}\" of tenant \"{tenant}\" was changed by a transaction that committed after this transaction's snapshot was taken."),
        "Retry the whole transaction.",
    )
}

/// XX000 with a readable message, for SPI failures that only a bug in pg_idem can cause.
pub fn internal(what: &str, error: impl std::fmt::Display) -> IdemError {
    IdemError::new(
        PgSqlErrorCode::ERRCODE_INTERNAL_ERROR,
        format!("pg_idem internal error: {what}"),
        format!("{error}"),
        "This is a bug in pg_idem; please report it with the statement that caused it.",
    )
}
