//! Walks a jsonb value straight from its binary container, in canonical order, into a
//! [`canonical_json::Writer`]. Nothing is printed to text and re-parsed, and nothing is copied
//! into Rust memory: the only allocations are a sorted index of each object's keys and the text
//! of each number, both in PostgreSQL's current memory context, so a value too large for the
//! session fails there with PostgreSQL's own "out of memory" (53200) instead of aborting the
//! backend. The walk is linear apart from sorting each object's keys (n log n), checks the stack
//! depth on every level (54001 instead of a crash on deep values) and checks for interrupts as it
//! goes (statement_timeout and pg_terminate_backend stop it).
//!
//! The binary layout read here is PostgreSQL's (src/include/utils/jsonb.h), the same in 14 to 18:
//! a container is a header word (count and kind) followed by one JEntry per child (for objects,
//! all keys first, then all values) and then the children's data; a JEntry holds the child's
//! type and either its length or, every JB_OFFSET_STRIDE entries, its end offset.
//! `getJsonbOffset` and `getJsonbLength` decode those; numbers and nested containers start at
//! the next 4-byte boundary of their offset.

use std::ffi::CStr;

use pgrx::pg_sys;

use crate::errors;
use crate::hashing::canonical_json::{Sink, Writer};
use crate::pg::datum::Jsonb;

/// How many values are visited between two interrupt checks.
const INTERRUPT_EVERY: u32 = 4096;

/// Writes the canonical form of `value` into `writer`.
pub fn write_canonical<S: Sink>(value: Jsonb, writer: &mut Writer<S>) {
    let mut walk = Walk { writer, visited: 0 };
    let root = value.root();
    // SAFETY: `root` points at the root container of a detoasted jsonb value that stays
    // allocated in the current memory context for the whole walk (see `Jsonb::root`).
    unsafe { walk.container(root) };
}

struct Walk<'w, S: Sink> {
    writer: &'w mut Writer<S>,
    visited: u32,
}

/// Where one object key lies in its container's data area.
#[derive(Clone, Copy)]
struct KeyRef {
    start: u32,
    len: u32,
    /// index of the key among the container's keys
    index: u32,
}

/// PostgreSQL's INTALIGN.
fn int_align(offset: u32) -> usize {
    (offset as usize + 3) & !3
}

impl<S: Sink> Walk<'_, S> {
    fn tick(&mut self) {
        self.visited = self.visited.wrapping_add(1);
        if self.visited.is_multiple_of(INTERRUPT_EVERY) {
            pgrx::check_for_interrupts!();
        }
    }

    /// # Safety
    /// `container` points at a valid jsonb container that outlives the call.
    unsafe fn container(&mut self, container: *const pg_sys::JsonbContainer) {
        // SAFETY: plain C calls; check_stack_depth raises 54001 (as a Rust panic that pgrx turns
        // back into the ERROR) before the Rust recursion below can outgrow the stack.
        unsafe { pg_sys::check_stack_depth() };
        pgrx::check_for_interrupts!();
        // SAFETY: the caller guarantees a valid container: its header word is readable.
        let header = unsafe { (*container).header };
        let count = header & pg_sys::JB_CMASK;
        if header & pg_sys::JB_FOBJECT != 0 {
            // SAFETY: an object of `count` pairs has 2 * count JEntries, then its data area.
            let data = unsafe { data_area(container, 2 * count) };
            // SAFETY: as above; `data` is this container's data area.
            unsafe { self.object(container, data, count) };
        } else if header & pg_sys::JB_FARRAY != 0 {
            // SAFETY: an array of `count` elements has count JEntries, then its data area.
            let data = unsafe { data_area(container, count) };
            if header & pg_sys::JB_FSCALAR != 0 {
                if count != 1 {
                    impossible(format!("a scalar container with {count} elements"));
                }
                // SAFETY: index 0 exists (count is 1).
                unsafe { self.value(container, data, 0) };
            } else {
                self.writer.begin_array();
                for i in 0..count {
                    // SAFETY: i < count, the number of this array's entries.
                    unsafe { self.value(container, data, i) };
                }
                self.writer.end_array();
            }
        } else {
            impossible(format!("a container header of 0x{header:08x}"));
        }
    }

    /// # Safety
    /// `container` is a valid object container of `count` pairs and `data` its data area.
    unsafe fn object(
        &mut self,
        container: *const pg_sys::JsonbContainer,
        data: *const u8,
        count: u32,
    ) {
        // jsonb orders keys by length first; the canonical form orders them by their bytes
        let keys = palloc_slice::<KeyRef>(count as usize);
        for (i, key) in keys.iter_mut().enumerate() {
            // SAFETY: i < count: a key entry of this container.
            let (start, len) = unsafe { child_extent(container, i as u32) };
            *key = KeyRef {
                start,
                len,
                index: i as u32,
            };
            self.tick();
        }
        // SAFETY: every key lies inside this container's data area (offsets come from its own
        // JEntries), which lives as long as the walk.
        let bytes = |k: &KeyRef| unsafe {
            std::slice::from_raw_parts(data.add(k.start as usize), k.len as usize)
        };
        let mut comparisons: u32 = 0;
        keys.sort_unstable_by(|a, b| {
            comparisons = comparisons.wrapping_add(1);
            if comparisons.is_multiple_of(INTERRUPT_EVERY * 16) {
                pgrx::check_for_interrupts!();
            }
            bytes(a).cmp(bytes(b))
        });
        self.writer.begin_object();
        for key in keys.iter() {
            self.writer.key(bytes(key));
            // SAFETY: values follow the keys: entry count + index is this key's value.
            unsafe { self.value(container, data, count + key.index) };
        }
        self.writer.end_object();
        // SAFETY: `keys` was palloc'd above and is not used after this point.
        unsafe { pg_sys::pfree(keys.as_mut_ptr().cast()) };
    }

    /// # Safety
    /// `index` is a child of the valid `container`, and `data` its data area.
    unsafe fn value(
        &mut self,
        container: *const pg_sys::JsonbContainer,
        data: *const u8,
        index: u32,
    ) {
        self.tick();
        // SAFETY: index is within the container's JEntries (caller's guarantee).
        let entry = unsafe { *entries(container).add(index as usize) };
        // SAFETY: as above.
        let (start, len) = unsafe { child_extent(container, index) };
        match entry & pg_sys::JENTRY_TYPEMASK {
            pg_sys::JENTRY_ISSTRING => {
                // SAFETY: a string child is `len` bytes at `start` of the data area.
                let bytes =
                    unsafe { std::slice::from_raw_parts(data.add(start as usize), len as usize) };
                self.writer.string(bytes);
            }
            pg_sys::JENTRY_ISNUMERIC => {
                // SAFETY: a numeric child is a numeric varlena at the next 4-byte boundary.
                let numeric = unsafe { data.add(int_align(start)) };
                self.number(numeric);
            }
            pg_sys::JENTRY_ISBOOL_FALSE => self.writer.bool(false),
            pg_sys::JENTRY_ISBOOL_TRUE => self.writer.bool(true),
            pg_sys::JENTRY_ISNULL => self.writer.null(),
            pg_sys::JENTRY_ISCONTAINER => {
                // SAFETY: a nested container starts at the next 4-byte boundary and lies inside
                // this one, so it is as valid and long-lived as its parent.
                unsafe {
                    self.container(data.add(int_align(start)).cast::<pg_sys::JsonbContainer>())
                };
            }
            other => impossible(format!("a JEntry type of 0x{other:08x}")),
        }
    }

    /// A numeric varlena, written as the plain decimal text `numeric_out` prints.
    fn number(&mut self, numeric: *const u8) {
        let datum = pg_sys::Datum::from(numeric);
        // SAFETY: numeric_out takes one non-null numeric datum and returns a palloc'd C string.
        let text = unsafe {
            pgrx::fcinfo::direct_function_call_as_datum(pg_sys::numeric_out, &[Some(datum)])
        }
        .unwrap_or_else(|| impossible("numeric_out returned NULL".into()));
        let ptr = text.cast_mut_ptr::<std::ffi::c_char>();
        // SAFETY: numeric_out returns a NUL-terminated string.
        let bytes = unsafe { CStr::from_ptr(ptr) }.to_bytes();
        if self.writer.number(bytes).is_err() {
            impossible(format!(
                "numeric_out printed {:?}",
                String::from_utf8_lossy(bytes)
            ));
        }
        // SAFETY: the string was palloc'd by numeric_out and is not used after this point.
        unsafe { pg_sys::pfree(ptr.cast()) };
    }
}

/// The JEntries of a container.
///
/// # Safety
/// `container` is a valid jsonb container.
unsafe fn entries(container: *const pg_sys::JsonbContainer) -> *const pg_sys::JEntry {
    // SAFETY: the entries are the flexible array member right after the header.
    unsafe { (*container).children.as_ptr() }
}

/// Where a container's data area begins, after its `n_entries` JEntries.
///
/// # Safety
/// `container` is a valid jsonb container with exactly `n_entries` entries.
unsafe fn data_area(container: *const pg_sys::JsonbContainer, n_entries: u32) -> *const u8 {
    // SAFETY: the data area starts right after the last JEntry.
    unsafe { entries(container).add(n_entries as usize).cast::<u8>() }
}

/// Offset and length of a child in its container's data area.
///
/// # Safety
/// `index` is a child of the valid `container`.
unsafe fn child_extent(container: *const pg_sys::JsonbContainer, index: u32) -> (u32, u32) {
    // SAFETY: PostgreSQL's own decoders of the JEntry array, for a valid index.
    unsafe {
        (
            pg_sys::getJsonbOffset(container, index as i32),
            pg_sys::getJsonbLength(container, index as i32),
        )
    }
}

/// A zeroed palloc'd slice of `len` values, freed with the current memory context (or by the
/// caller): an allocation that does not fit fails with PostgreSQL's "out of memory" (53200).
fn palloc_slice<T: Copy>(len: usize) -> &'static mut [T] {
    let bytes = len.max(1).saturating_mul(std::mem::size_of::<T>());
    let flags = (pg_sys::MCXT_ALLOC_HUGE | pg_sys::MCXT_ALLOC_ZERO) as i32;
    // SAFETY: palloc_extended returns zeroed memory of the size asked, aligned for any type
    // (MAXALIGN), or raises an ERROR (never NULL without MCXT_ALLOC_NO_OOM). Callers only use
    // it with plain integer structs, for which all-zero bytes are a valid value.
    unsafe {
        let ptr = pg_sys::palloc_extended(bytes, flags).cast::<T>();
        std::slice::from_raw_parts_mut(ptr, len)
    }
}

/// jsonb that PostgreSQL itself wrote can never fail these checks.
fn impossible(what: String) -> ! {
    errors::internal("reading a jsonb value", format!("unexpected {what}")).raise()
}
