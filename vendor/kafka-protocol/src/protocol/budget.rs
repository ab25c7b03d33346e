//! Vendored patch (PATCHES.md, "decode budget"): an optional cap on the memory one decode may
//! build. Bounded decoding (`types.rs`) makes every array element take at least one byte of the
//! buffer, but an element of one or two bytes can decode into a struct of a hundred; a frame of a
//! few megabytes of empty elements then becomes gigabytes of structs. Inside [`within`], every
//! array charges `count × size_of::<element>()` and every unknown tagged field
//! [`TAGGED_FIELD_COST`] bytes ([`FIRST_TAGGED_FIELD_COST`] for a struct's first) before it is built, and decoding fails once the charges pass the
//! limit. Outside [`within`] nothing is charged (the crate behaves as upstream).
//!
//! The budget is per thread: a decode runs synchronously on one thread from start to end.

use std::cell::Cell;

use anyhow::{bail, Result};

/// What one more unknown tagged field is charged: its map entry (key, `Bytes`) and its share of a
/// B-tree node.
pub const TAGGED_FIELD_COST: usize = 96;
/// What the first unknown tagged field of a struct is charged: the map's first node (a B-tree
/// leaf of `i32` keys and `Bytes` values is about 400 bytes, whatever it holds).
pub const FIRST_TAGGED_FIELD_COST: usize = 512;

thread_local! {
    /// Bytes left to charge; `None` when no budget is in force.
    static LEFT: Cell<Option<usize>> = const { Cell::new(None) };
}

/// Runs `decode` with at most `limit` bytes of charges; the budget in force before (if any) is
/// restored afterwards, whatever `decode` returns.
pub fn within<R>(limit: usize, decode: impl FnOnce() -> R) -> R {
    struct Restore(Option<usize>);
    impl Drop for Restore {
        fn drop(&mut self) {
            LEFT.with(|l| l.set(self.0));
        }
    }
    let _restore = Restore(LEFT.with(|l| l.replace(Some(limit))));
    decode()
}

/// Whether a budget is in force on this thread.
pub fn active() -> bool {
    LEFT.with(|l| l.get().is_some())
}

/// Charges `bytes` (`what` names it in the error); fails when the budget in force has less left.
pub fn charge(what: &str, bytes: usize) -> Result<()> {
    LEFT.with(|l| match l.get() {
        None => Ok(()),
        Some(left) if bytes <= left => {
            l.set(Some(left - bytes));
            Ok(())
        }
        Some(left) => bail!("{what} would take {bytes} bytes decoded, more than the {left} bytes left of this frame's decode budget"),
    })
}

/// Charges `count` elements of `T`.
pub fn charge_elements<T>(what: &str, count: usize) -> Result<()> {
    charge(what, count.saturating_mul(std::mem::size_of::<T>().max(1)))
}

/// Charges one unknown tagged field (`first`: the struct's map of them is still empty).
pub fn charge_tagged_field(first: bool) -> Result<()> {
    charge(
        "a tagged field",
        if first {
            FIRST_TAGGED_FIELD_COST
        } else {
            TAGGED_FIELD_COST
        },
    )
}
