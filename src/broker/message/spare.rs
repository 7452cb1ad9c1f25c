//! Spare message allocations, kept per thread for the next message of the same size (issue
//! 16). A queue under steady load frees one message and allocates the next of the same size
//! thousands of times a second; glibc serves allocations of 1 KiB and more (past its
//! per-thread cache's 1,032 bytes) from its bins, merging and splitting chunks on every call:
//! 8–9 % of the broker's CPU in S1 (`_int_malloc`, `_int_free`, `unlink_chunk`). A freed
//! allocation of a size in use is kept here instead and handed to the next one of exactly
//! that size, still in the CPU's cache.
//!
//! Bounded: at most [`SIZES`] sizes of at most [`LARGEST`] bytes, [`PER_SIZE`] allocations
//! and [`BYTES_PER_SIZE`] bytes each, per thread (≤ 4 MiB per thread, not counted by the
//! memory budget: memory the process would hold in glibc's bins as well). A thread's spares
//! are freed when it ends.

use std::alloc::{Layout, alloc, dealloc};
use std::cell::RefCell;
use std::ptr::NonNull;

/// How many different sizes a thread keeps spares of.
const SIZES: usize = 4;
/// The most spares of one size (fewer for sizes past 1 KiB: see [`BYTES_PER_SIZE`]). A
/// queue under load frees and allocates in runs of dozens to hundreds (a read's transfers,
/// a receiver's settlements): 32 kept caught few of them, 256 nearly as many as 1,024
/// (cachegrind, S1: −0.5 %, −3.8 % and −4.1 % instructions) on one queue. With ten queues
/// busy at once a receiver settles up to its credit (1,000) at a time, and frees past 256
/// went back to glibc's bins, merging with cold neighbours (`_int_free`, `unlink_chunk`:
/// 70 ns a message against 20 on one queue).
const PER_SIZE: usize = 1024;
/// The most bytes kept in spares of one size.
const BYTES_PER_SIZE: usize = 1024 * 1024;
/// The largest allocation kept.
pub const LARGEST: usize = 4096;

/// Spares of one size.
struct Stack {
    /// Their layout (size 0: the stack is free for any size).
    layout: Layout,
    blocks: [*mut u8; PER_SIZE],
    len: usize,
}

/// One thread's spares.
struct Spares {
    stacks: [Stack; SIZES],
}

const EMPTY: Stack = Stack {
    layout: Layout::new::<()>(),
    blocks: [std::ptr::null_mut(); PER_SIZE],
    len: 0,
};

impl Drop for Spares {
    fn drop(&mut self) {
        for stack in &mut self.stacks {
            for &block in &stack.blocks[..stack.len] {
                // SAFETY: each block was allocated (by `take` or the global allocator)
                // with this stack's layout and is owned by the stack alone.
                unsafe { dealloc(block, stack.layout) };
            }
            stack.len = 0;
        }
    }
}

thread_local! {
    static SPARES: RefCell<Spares> = const {
        RefCell::new(Spares {
            stacks: [EMPTY; SIZES],
        })
    };
}

/// An allocation of `layout`: a spare of exactly that layout when this thread has one,
/// else a new one (null when the allocator fails). `layout` must not be zero-sized.
pub fn take(layout: Layout) -> *mut u8 {
    if layout.size() <= LARGEST {
        let spare = SPARES
            .try_with(|spares| {
                let mut spares = spares.borrow_mut();
                let stack = spares
                    .stacks
                    .iter_mut()
                    .find(|stack| stack.layout == layout && stack.len > 0)?;
                stack.len -= 1;
                Some(stack.blocks[stack.len])
            })
            .ok()
            .flatten();
        if let Some(block) = spare {
            return block;
        }
    }
    // SAFETY: the caller's layout is not zero-sized.
    unsafe { alloc(layout) }
}

/// Gives back an allocation of `layout` made by [`take`]: kept as a spare when there is
/// room for its size, else freed.
///
/// # Safety
/// `block` came from [`take`] with this `layout` and is not used again by the caller.
pub unsafe fn give(block: NonNull<u8>, layout: Layout) {
    if layout.size() <= LARGEST {
        let kept = SPARES
            .try_with(|spares| {
                let mut spares = spares.borrow_mut();
                let stacks = &mut spares.stacks;
                let index = stacks
                    .iter()
                    .position(|stack| stack.layout == layout)
                    .or_else(|| stacks.iter().position(|stack| stack.len == 0))?;
                let stack = &mut stacks[index];
                if stack.len == PER_SIZE.min(BYTES_PER_SIZE / layout.size()) {
                    return None;
                }
                stack.layout = layout;
                stack.blocks[stack.len] = block.as_ptr();
                stack.len += 1;
                Some(())
            })
            .ok()
            .flatten();
        if kept.is_some() {
            return;
        }
    }
    // SAFETY: as the caller promises, allocated with `layout` and no longer used.
    unsafe { dealloc(block.as_ptr(), layout) };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layout(size: usize) -> Layout {
        Layout::from_size_align(size, 8).unwrap()
    }

    #[test]
    fn a_freed_allocation_is_handed_to_the_next_of_its_size_and_no_other() {
        std::thread::spawn(|| {
            let first = take(layout(1100));
            // SAFETY: from `take` with this layout, not used again.
            unsafe { give(NonNull::new(first).unwrap(), layout(1100)) };
            let other = take(layout(1108));
            assert_ne!(other, first, "a spare of another size is not handed out");
            let again = take(layout(1100));
            assert_eq!(again, first, "the spare of this size is handed out");
            // SAFETY: as above.
            unsafe {
                give(NonNull::new(other).unwrap(), layout(1108));
                give(NonNull::new(again).unwrap(), layout(1100));
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    fn spares_are_bounded_per_size_and_in_sizes() {
        std::thread::spawn(|| {
            // More allocations than a size keeps, in more sizes than are kept (the last
            // past the largest kept).
            let sizes = [600, 4000, 800, 900, 1000, 5000];
            let blocks: Vec<(usize, *mut u8)> = sizes
                .iter()
                .flat_map(|&size| (0..PER_SIZE + 5).map(move |_| size))
                .map(|size| (size, take(layout(size))))
                .collect();
            for &(size, block) in &blocks {
                // SAFETY: from `take` with this layout, not used again.
                unsafe { give(NonNull::new(block).unwrap(), layout(size)) };
            }
            SPARES.with(|spares| {
                let spares = spares.borrow();
                let kept: Vec<(usize, usize)> = spares
                    .stacks
                    .iter()
                    .map(|stack| (stack.layout.size(), stack.len))
                    .collect();
                assert_eq!(
                    kept,
                    vec![
                        (600, PER_SIZE),
                        (4000, BYTES_PER_SIZE / 4000),
                        (800, PER_SIZE),
                        (900, PER_SIZE)
                    ],
                    "the first four sizes fill their stacks (4,000 B ones up to the bytes \
                     kept per size); the rest are freed"
                );
            });
        })
        .join()
        .unwrap();
    }
}
