//! Bridges between PostgreSQL datums and Rust that pgrx does not provide in the shape we need:
//! a jsonb value carried through untouched, and one-row records built against the function's
//! declared OUT parameters.

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::memcxt::PgMemoryContexts;
use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum};

use crate::errors;

/// A jsonb value that is never parsed into Rust: what a caller stores is replayed byte for byte
/// (pgrx's `JsonB` goes through serde_json, which would round numbers).
#[derive(Clone, Copy, Debug)]
pub struct Jsonb(pg_sys::Datum);

impl Jsonb {
    /// Size of the value once decompressed, in bytes, as counted by pg_idem.max_response_bytes.
    pub fn raw_size(self) -> usize {
        unsafe { pg_sys::toast_raw_datum_size(self.0) }
    }

    /// The root container of the value, detoasted into the current memory context (the value
    /// itself when it is not toasted), valid until that context is reset.
    pub fn root(self) -> *const pg_sys::JsonbContainer {
        // SAFETY: self.0 is a non-null jsonb datum (NULLs never become a Jsonb); detoasting
        // returns a plain varlena laid out as `Jsonb`, whose root container follows the header.
        unsafe {
            let value = pg_sys::pg_detoast_datum(self.0.cast_mut_ptr()).cast::<pg_sys::Jsonb>();
            &raw const (*value).root
        }
    }
}

impl FromDatum for Jsonb {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            None
        } else {
            Some(Jsonb(datum))
        }
    }

    /// Copies (and detoasts) the value, so it outlives the SPI call that produced it.
    unsafe fn from_datum_in_memory_context(
        mut memory_context: PgMemoryContexts,
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            return None;
        }
        memory_context.switch_to(|_| unsafe {
            let copy = pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr());
            Some(Jsonb(pg_sys::Datum::from(copy)))
        })
    }
}

impl IntoDatum for Jsonb {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

unsafe impl<'fcx> ArgAbi<'fcx> for Jsonb {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| {
            errors::internal(
                "unboxing a jsonb argument",
                format!("argument {index} is null"),
            )
            .raise()
        })
    }
}

unsafe impl BoxRet for Jsonb {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

pgrx::impl_sql_translatable!(Jsonb, "jsonb");

/// A composite value already formed as a datum: the result of a function declared with OUT
/// parameters (RETURNS record).
pub struct Record(pg_sys::Datum);

unsafe impl BoxRet for Record {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

pgrx::impl_sql_translatable!(Record, "record");

/// One output column: its datum, or None for SQL NULL.
pub type Column = Option<pg_sys::Datum>;

thread_local! {
    /// Blessed result descriptors by function OID, for the life of the backend: fn_extra only
    /// lives as long as one execution of the calling statement, and building the descriptor
    /// from the catalogs on every call costs more than the rest of a replay.
    static RESULT_DESCRIPTORS: std::cell::RefCell<std::collections::HashMap<pg_sys::Oid, usize>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

fn result_descriptor(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::TupleDesc {
    unsafe {
        let fn_oid = (*(*fcinfo).flinfo).fn_oid;
        if let Some(cached) = RESULT_DESCRIPTORS.with(|m| m.borrow().get(&fn_oid).copied()) {
            return cached as pg_sys::TupleDesc;
        }
        let mut declared: pg_sys::TupleDesc = std::ptr::null_mut();
        let kind = pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut declared);
        if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || declared.is_null() {
            errors::internal(
                "building a result row",
                "the function is not declared with OUT parameters",
            )
            .raise();
        }
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let blessed = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(declared));
        pg_sys::MemoryContextSwitchTo(old);
        RESULT_DESCRIPTORS.with(|m| m.borrow_mut().insert(fn_oid, blessed as usize));
        blessed
    }
}

/// Forms the one-row result of the function being called from its declared OUT parameters.
pub fn record(fcinfo: pg_sys::FunctionCallInfo, columns: &[Column]) -> Record {
    let tupdesc = result_descriptor(fcinfo);
    unsafe {
        if (*tupdesc).natts as usize != columns.len() {
            errors::internal(
                "building a result row",
                format!(
                    "{} columns declared, {} built",
                    (*tupdesc).natts,
                    columns.len()
                ),
            )
            .raise();
        }
        let mut values: Vec<pg_sys::Datum> = columns
            .iter()
            .map(|c| c.unwrap_or(pg_sys::Datum::from(0)))
            .collect();
        let mut nulls: Vec<bool> = columns.iter().map(Option::is_none).collect();
        let tuple = pg_sys::heap_form_tuple(tupdesc, values.as_mut_ptr(), nulls.as_mut_ptr());
        Record(pgrx::heap_tuple_get_datum(tuple))
    }
}
