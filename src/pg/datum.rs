//! Bridges between PostgreSQL datums and Rust that pgrx does not provide in the shape we need:
//! a jsonb value carried through untouched, and one-row records built against the function's
//! declared OUT parameters.

use std::marker::PhantomData;

use pgrx::callconv::{Arg, ArgAbi, BoxRet, FcInfo};
use pgrx::datum::Datum;
use pgrx::memcxt::PgMemoryContexts;
use pgrx::pg_sys;
use pgrx::{FromDatum, IntoDatum};

use crate::errors;
use crate::pg::caches::{self, Depends};

/// A jsonb value that is never parsed into Rust: what a caller stores is replayed byte for byte
/// (pgrx's `JsonB` goes through serde_json, which would round numbers). It points into a memory
/// context, `'mcx`: the SQL function call's, for arguments, results, and values the store copies
/// out of SPI for the call. The lifetime keeps it from being kept past the call (in a static or
/// a per-backend cache) the way a plain pointer could be.
#[derive(Clone, Copy, Debug)]
pub struct Jsonb<'mcx>(pg_sys::Datum, PhantomData<&'mcx ()>);

impl Jsonb<'_> {
    /// Size of the value once decompressed, in bytes, as counted by pg_idem.max_response_bytes.
    pub fn raw_size(self) -> usize {
        // SAFETY: self.0 is a non-null jsonb (varlena) datum; this reads its header only.
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

/// The memory context of the SQL function being called, where values that must outlive SPI
/// and the key store's look-ups (a jsonb copied out of a row) are allocated, and how long they
/// live: `'m`, no longer than the call. Values copied into it carry `'m`, so safe code can keep
/// them neither past the call nor in a static; only `current`, which is unsafe, chooses `'m`.
#[derive(Clone, Copy)]
pub struct CallMemory<'m> {
    context: pg_sys::MemoryContext,
    call: PhantomData<&'m ()>,
}

impl<'m> CallMemory<'m> {
    /// The current memory context.
    ///
    /// # Safety
    /// Call it in the SQL function's own memory context (before SPI or anything else switches
    /// it), with `'m` no longer than the function's call: the lifetime of its arguments, or a
    /// local borrow when nothing allocated there is returned.
    pub unsafe fn current() -> Self {
        CallMemory {
            // SAFETY: a read of the backend's current memory context.
            context: unsafe { pg_sys::CurrentMemoryContext },
            call: PhantomData,
        }
    }

    /// Copies (and detoasts) a jsonb datum into this memory.
    ///
    /// # Safety
    /// `datum` must be a valid jsonb datum, readable until the copy is made.
    pub unsafe fn copy_jsonb(self, datum: pg_sys::Datum) -> Jsonb<'m> {
        // SAFETY: the caller passes a valid jsonb datum; from_datum_in_memory_context copies it
        // into this context, which lives for 'm.
        unsafe {
            <Jsonb as FromDatum>::from_datum_in_memory_context(
                PgMemoryContexts::For(self.context),
                datum,
                false,
                pg_sys::JSONBOID,
            )
        }
        .unwrap_or_else(|| errors::internal("copying a jsonb value", "NULL").raise())
    }
}

impl FromDatum for Jsonb<'_> {
    unsafe fn from_polymorphic_datum(
        datum: pg_sys::Datum,
        is_null: bool,
        _: pg_sys::Oid,
    ) -> Option<Self> {
        if is_null {
            None
        } else {
            Some(Jsonb(datum, PhantomData))
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
        // SAFETY: the datum is a non-null jsonb from the caller (an SPI result row); the copy is
        // made in `memory_context`, which the caller chose to outlive the SPI call.
        memory_context.switch_to(|_| unsafe {
            let copy = pg_sys::pg_detoast_datum_copy(datum.cast_mut_ptr());
            Some(Jsonb(pg_sys::Datum::from(copy), PhantomData))
        })
    }
}

impl IntoDatum for Jsonb<'_> {
    fn into_datum(self) -> Option<pg_sys::Datum> {
        Some(self.0)
    }

    fn type_oid() -> pg_sys::Oid {
        pg_sys::JSONBOID
    }
}

// SAFETY: an element of a jsonb[] that pgrx's Array hands out is a non-null jsonb datum pointing
// into the array, which lives as long as the array ('src); it is carried as is.
unsafe impl pgrx::datum::UnboxDatum for Jsonb<'_> {
    type As<'src>
        = Jsonb<'src>
    where
        Self: 'src;
    unsafe fn unbox<'src>(datum: Datum<'src>) -> Self::As<'src>
    where
        Self: 'src,
    {
        Jsonb(datum.sans_lifetime(), PhantomData)
    }
}

// SAFETY: unboxing reads one jsonb argument from the call frame, as the SQL signature declares.
unsafe impl<'fcx> ArgAbi<'fcx> for Jsonb<'fcx> {
    unsafe fn unbox_arg_unchecked(arg: Arg<'_, 'fcx>) -> Self {
        let index = arg.index();
        // SAFETY: the argument is declared jsonb in the function's SQL signature.
        unsafe { arg.unbox_arg_using_from_datum() }.unwrap_or_else(|| {
            errors::internal(
                "unboxing a jsonb argument",
                format!("argument {index} is null"),
            )
            .raise()
        })
    }
}

// SAFETY: a Jsonb is a valid jsonb datum, returned as is.
unsafe impl BoxRet for Jsonb<'_> {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        // SAFETY: a jsonb datum for a function declared to return jsonb, allocated in the
        // caller's memory context (arguments, or copies made with from_datum_in_memory_context).
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

pgrx::impl_sql_translatable!(Jsonb<'_>, "jsonb");

/// A composite value already formed as a datum: the result of a function declared with OUT
/// parameters (RETURNS record).
pub struct Record(pg_sys::Datum);

// SAFETY: a Record is a composite datum formed against the function's own result descriptor.
unsafe impl BoxRet for Record {
    unsafe fn box_into<'fcx>(self, fcinfo: &mut FcInfo<'fcx>) -> Datum<'fcx> {
        // SAFETY: a composite datum formed by `record` against this function's own descriptor.
        unsafe { fcinfo.return_raw_datum(self.0) }
    }
}

pgrx::impl_sql_translatable!(Record, "record");

/// One output column: its datum, or None for SQL NULL.
pub type Column = Option<pg_sys::Datum>;

thread_local! {
    /// Blessed result descriptors by function OID, and the generation of `Depends::Functions`
    /// they were built at: fn_extra only lives as long as one execution of the calling
    /// statement, and building the descriptor from the catalogs on every call costs more than
    /// the rest of a replay. Any pg_proc change empties it, so a function whose OUT columns
    /// change (an ALTER EXTENSION UPDATE that drops and recreates it, possibly under a reused
    /// OID) is never served a stale one by a pooled backend. Emptying forgets the map only: the
    /// descriptors stay allocated (a few hundred bytes each, in TopMemoryContext), as a record
    /// datum formed with one may still be in flight in this backend.
    static RESULT_DESCRIPTORS: std::cell::RefCell<(u64, std::collections::HashMap<pg_sys::Oid, usize>)> =
        std::cell::RefCell::new((0, std::collections::HashMap::new()));
}

fn result_descriptor(fcinfo: pg_sys::FunctionCallInfo) -> pg_sys::TupleDesc {
    let generation = caches::generation(Depends::Functions);
    // SAFETY: fcinfo is the live call frame of the SQL function being executed, so flinfo is set.
    let fn_oid = unsafe { (*(*fcinfo).flinfo).fn_oid };
    let cached = RESULT_DESCRIPTORS.with(|m| {
        let mut m = m.borrow_mut();
        if m.0 != generation {
            *m = (generation, std::collections::HashMap::new());
        }
        m.1.get(&fn_oid).copied()
    });
    if let Some(cached) = cached {
        return cached as pg_sys::TupleDesc;
    }
    let mut declared: pg_sys::TupleDesc = std::ptr::null_mut();
    // SAFETY: get_call_result_type reads the call frame and the catalogs; `declared` is an out
    // parameter it fills for composite results.
    let kind = unsafe { pg_sys::get_call_result_type(fcinfo, std::ptr::null_mut(), &mut declared) };
    if kind != pg_sys::TypeFuncClass::TYPEFUNC_COMPOSITE || declared.is_null() {
        errors::internal(
            "building a result row",
            "the function is not declared with OUT parameters",
        )
        .raise();
    }
    // SAFETY: the copy is made in TopMemoryContext, so it lives as long as the cache entry;
    // BlessTupleDesc registers its record type for this backend. `declared` is non-null.
    let blessed = unsafe {
        let old = pg_sys::MemoryContextSwitchTo(pg_sys::TopMemoryContext);
        let blessed = pg_sys::BlessTupleDesc(pg_sys::CreateTupleDescCopy(declared));
        pg_sys::MemoryContextSwitchTo(old);
        blessed
    };
    // kept only if no pg_proc change arrived while it was built from the catalogs
    if caches::generation(Depends::Functions) == generation {
        RESULT_DESCRIPTORS.with(|m| m.borrow_mut().1.insert(fn_oid, blessed as usize));
    }
    blessed
}

/// Forms the one-row result of the function being called from its declared OUT parameters.
pub fn record(fcinfo: pg_sys::FunctionCallInfo, columns: &[Column]) -> Record {
    let tupdesc = result_descriptor(fcinfo);
    // SAFETY: tupdesc is a valid blessed descriptor (above); heap_form_tuple reads exactly natts
    // values and nulls, which the check guarantees the two arrays have.
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
