//! One allocation counted by reference: a small fixed head, a pointer to rare fields (only
//! when there are any) and bytes (issue 16). triomphe's `ThinArc` kept an 8-byte count and
//! an 8-byte length in front of every message, and the rare fields' pointer in every head;
//! here the count takes 2 bytes and the length 4 (a message's head 2 more: an 8-byte
//! prefix, issue 43) and the pointer is there only for the few messages that have rare
//! fields.
//!
//! Layout, from the start of the allocation: [`Prefix`] (count, head, length with the
//! rare-fields flag in its top bit), then, when the flag is set, a `*mut E` (null once the
//! rare fields were taken out), then the bytes.
//!
//! The reference count follows `std::sync::Arc`: a clone increments it (`Relaxed`), a drop
//! decrements it (`Release`) and the last one (after an `Acquire` fence) drops the rare
//! fields and frees the allocation. A handle gives out `&mut` access only while its count
//! is 1. The count is 16 bits: a clone of an allocation already shared by [`SHARE_LIMIT`]
//! handles is a copy in an allocation of its own (the same head, rare fields and bytes, so
//! nothing a reader sees differs), and only [`ABORT_AT`] handles at once, which takes that
//! many clones racing, abort the process rather than let the count wrap.

use std::alloc::{Layout, handle_alloc_error};
use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering, fence};

use super::spare;

/// The length's top bit: the allocation holds a rare-fields pointer.
const HAS_EXTRAS: u32 = 1 << 31;

/// The longest byte string one allocation holds (2 GiB − 1; ingress refuses a message past
/// 100 MiB).
pub const MAX_LEN: usize = (HAS_EXTRAS - 1) as usize;

/// The most handles sharing one allocation: a clone past it copies (a message is shared by
/// its copies in a topic's subscriptions, at most a few thousand, and for moments by its
/// deliveries and log writes).
const SHARE_LIMIT: u16 = 1 << 14;

/// A count this high means clones raced past [`SHARE_LIMIT`] by tens of thousands at once:
/// the process aborts rather than let the count wrap, as `Arc` does.
const ABORT_AT: u16 = 0xc000;

/// The start of every allocation.
#[repr(C)]
struct Prefix<H> {
    count: AtomicU16,
    head: H,
    /// The bytes' length, and [`HAS_EXTRAS`].
    len: u32,
}

/// A shared, immutable head, optional rare fields and bytes in one allocation.
pub struct Shared<H: Copy, E: Clone> {
    ptr: NonNull<Prefix<H>>,
    /// Owns `Box<E>`s and hands out `&H`, `&E` and `&[u8]` to any thread.
    marker: PhantomData<(H, Box<E>)>,
}

// SAFETY: the head, rare fields and bytes are only read through shared references while
// the allocation is shared, and the count is atomic, as in `Arc<(H, E)>`.
unsafe impl<H: Copy + Send + Sync, E: Clone + Send + Sync> Send for Shared<H, E> {}
// SAFETY: as above.
unsafe impl<H: Copy + Send + Sync, E: Clone + Send + Sync> Sync for Shared<H, E> {}

impl<H: Copy, E: Clone> Shared<H, E> {
    /// Where the rare-fields pointer is, when there is one: after the prefix, aligned.
    const EXTRAS_AT: usize =
        std::mem::size_of::<Prefix<H>>().next_multiple_of(std::mem::align_of::<*mut E>());

    /// Where the bytes start, with and without the rare-fields pointer.
    const fn bytes_at(has_extras: bool) -> usize {
        if has_extras {
            Self::EXTRAS_AT + std::mem::size_of::<*mut E>()
        } else {
            std::mem::size_of::<Prefix<H>>()
        }
    }

    /// The allocation's layout, and where the rare-fields pointer (if any) and the bytes
    /// start (as [`Self::EXTRAS_AT`] and [`Self::bytes_at`] say).
    fn layout(len: usize, has_extras: bool) -> (Layout, usize, usize) {
        let prefix = Layout::new::<Prefix<H>>();
        let (before_bytes, extras_at) = if has_extras {
            prefix
                .extend(Layout::new::<*mut E>())
                .expect("a prefix and a pointer fit a layout")
        } else {
            (prefix, 0)
        };
        let (whole, bytes_at) = before_bytes
            .extend(Layout::array::<u8>(len).expect("at most MAX_LEN bytes"))
            .expect("at most MAX_LEN bytes fit a layout");
        (whole, extras_at, bytes_at)
    }

    /// One allocation holding `head`, `extras` and a copy of `parts`, one after another
    /// (each copied once, straight into it).
    ///
    /// # Panics
    /// When the parts are longer than [`MAX_LEN`] together (ingress keeps messages far
    /// shorter).
    pub fn new(head: H, extras: Option<Box<E>>, parts: &[&[u8]]) -> Self {
        let len: usize = parts.iter().map(|part| part.len()).sum();
        assert!(len <= MAX_LEN, "{len} bytes in one message");
        let (layout, extras_at, bytes_at) = Self::layout(len, extras.is_some());
        // The layout is never zero-sized (it holds a prefix). A spare of this size freed
        // on this thread when there is one.
        let raw = spare::take(layout);
        let Some(start) = NonNull::new(raw) else {
            handle_alloc_error(layout)
        };
        let flag = if extras.is_some() { HAS_EXTRAS } else { 0 };
        // SAFETY: `start` is a fresh allocation of `layout`, aligned for `Prefix<H>` (the
        // layout's first part), for a `*mut E` at `extras_at` and `bytes_at` bytes after the
        // start, with `len` bytes there, which the parts fill; nothing else refers to it yet.
        unsafe {
            start.cast::<Prefix<H>>().write(Prefix {
                count: AtomicU16::new(1),
                head,
                len: len as u32 | flag,
            });
            if let Some(extras) = extras {
                start
                    .add(extras_at)
                    .cast::<*mut E>()
                    .write(Box::into_raw(extras));
            }
            let mut at = start.add(bytes_at);
            for part in parts {
                std::ptr::copy_nonoverlapping(part.as_ptr(), at.as_ptr(), part.len());
                at = at.add(part.len());
            }
        }
        Shared {
            ptr: start.cast(),
            marker: PhantomData,
        }
    }

    fn prefix(&self) -> &Prefix<H> {
        // SAFETY: `ptr` points to a live, initialised prefix while a handle exists.
        unsafe { self.ptr.as_ref() }
    }

    fn len_and_flag(&self) -> (usize, bool) {
        let len = self.prefix().len;
        ((len & !HAS_EXTRAS) as usize, len & HAS_EXTRAS != 0)
    }

    /// Where the rare-fields pointer is, when there is one.
    fn extras_slot(&self) -> Option<*mut *mut E> {
        let (_, has_extras) = self.len_and_flag();
        has_extras.then(|| {
            // SAFETY: within the allocation (its layout has a pointer there).
            unsafe {
                self.ptr
                    .cast::<u8>()
                    .add(Self::EXTRAS_AT)
                    .cast::<*mut E>()
                    .as_ptr()
            }
        })
    }

    /// The fixed head.
    pub fn head(&self) -> &H {
        &self.prefix().head
    }

    /// The rare fields, if any.
    pub fn extras(&self) -> Option<&E> {
        let slot = self.extras_slot()?;
        // SAFETY: the slot holds null or a pointer from `Box::into_raw` that lives as long
        // as the allocation; it is only changed through `&mut self` while unique.
        unsafe { slot.read().as_ref() }
    }

    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        let (len, has_extras) = self.len_and_flag();
        // SAFETY: `len` initialised bytes start there (as the layout says), immutable while
        // shared.
        unsafe {
            std::slice::from_raw_parts(
                self.ptr
                    .cast::<u8>()
                    .add(Self::bytes_at(has_extras))
                    .as_ptr(),
                len,
            )
        }
    }

    /// Asks the CPU to start loading the allocation's first `lines` cache lines (the count,
    /// the head and the bytes' start), for a handle about to be used while other work goes
    /// on: a message delivered from a backlog was stored long ago and is no longer in any
    /// cache (issue 16). Only a hint: nothing is read, and it does nothing off x86-64.
    #[inline]
    pub fn prefetch(&self, lines: usize) {
        #[cfg(target_arch = "x86_64")]
        {
            let start = self.ptr.cast::<u8>().as_ptr();
            for line in 0..lines {
                // SAFETY: prefetching never faults and reads nothing the program sees; the
                // address may lie past the allocation's end (it is only a hint).
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        start.wrapping_add(line * 64) as *const i8,
                    );
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = lines;
    }

    /// Whether this handle is the only one (so it may change the allocation).
    fn is_unique(&self) -> bool {
        // Acquire: every other handle's release (its drop) happens before a change here.
        self.prefix().count.load(Ordering::Acquire) == 1
    }

    /// Changes the head and the rare fields: in place when this handle is the only one and
    /// the rare fields stay present or absent, else in a new allocation of the same bytes.
    pub fn edit<R>(&mut self, change: impl FnOnce(&mut H, &mut Option<Box<E>>) -> R) -> R {
        let mut head = *self.head();
        if !self.is_unique() {
            let mut extras = self.extras().map(|extras| Box::new(extras.clone()));
            let result = change(&mut head, &mut extras);
            *self = Shared::new(head, extras, &[self.bytes()]);
            return result;
        }
        let slot = self.extras_slot();
        // SAFETY: unique (count 1, and `&mut self`): nothing else reads the slot. It is
        // nulled before `change` runs, so a panic in it cannot free the rare fields twice.
        let mut extras = slot.and_then(|slot| unsafe {
            let taken = slot.replace(std::ptr::null_mut());
            (!taken.is_null()).then(|| Box::from_raw(taken))
        });
        let result = change(&mut head, &mut extras);
        match (slot, extras) {
            (Some(slot), Some(extras)) => {
                // SAFETY: as above; the slot is null, nothing is overwritten.
                unsafe { slot.write(Box::into_raw(extras)) };
                // SAFETY: unique: no shared reference to the prefix is alive.
                unsafe { self.ptr.as_mut().head = head };
            }
            (None, None) => {
                // SAFETY: as above.
                unsafe { self.ptr.as_mut().head = head };
            }
            (_, extras) => {
                // The rare fields came or went: a layout with or without their pointer
                // (the old allocation's slot is null, so dropping it frees only memory).
                *self = Shared::new(head, extras, &[self.bytes()]);
            }
        }
        result
    }
}

impl<H: Copy, E: Clone> Clone for Shared<H, E> {
    fn clone(&self) -> Self {
        // Relaxed, as `Arc::clone`: a new handle comes from an existing one.
        let before = self.prefix().count.fetch_add(1, Ordering::Relaxed);
        if before >= SHARE_LIMIT {
            if before >= ABORT_AT {
                std::process::abort();
            }
            // Shared by enough handles: this one's increment is taken back (the count
            // stays above zero, held by `self`) and the clone is a copy.
            self.prefix().count.fetch_sub(1, Ordering::Relaxed);
            return self.copy();
        }
        Shared {
            ptr: self.ptr,
            marker: PhantomData,
        }
    }
}

impl<H: Copy, E: Clone> Shared<H, E> {
    /// The same head, rare fields and bytes in an allocation of their own.
    fn copy(&self) -> Self {
        let extras = self.extras().map(|extras| Box::new(extras.clone()));
        Shared::new(*self.head(), extras, &[self.bytes()])
    }
}

impl<H: Copy, E: Clone> Drop for Shared<H, E> {
    fn drop(&mut self) {
        if self.prefix().count.fetch_sub(1, Ordering::Release) != 1 {
            return;
        }
        fence(Ordering::Acquire);
        let (len, has_extras) = self.len_and_flag();
        if let Some(slot) = self.extras_slot() {
            // SAFETY: the last handle: the slot's pointer (if not null) came from
            // `Box::into_raw` and is dropped once, here.
            unsafe {
                let extras = slot.read();
                if !extras.is_null() {
                    drop(Box::from_raw(extras));
                }
            }
        }
        let (layout, _, _) = Self::layout(len, has_extras);
        // SAFETY: allocated in `new` (by `spare::take`) with this layout (same length and
        // flag); `H: Copy` needs no drop; no handle remains.
        unsafe { spare::give(self.ptr.cast::<u8>(), layout) };
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Rare fields that count how many of them were dropped.
    #[derive(Debug)]
    struct Counted {
        value: u64,
        drops: Arc<AtomicUsize>,
    }

    impl Clone for Counted {
        fn clone(&self) -> Self {
            Counted {
                value: self.value,
                drops: Arc::clone(&self.drops),
            }
        }
    }

    impl Drop for Counted {
        fn drop(&mut self) {
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    type Handle = Shared<[u8; 16], Counted>;

    fn counted(value: u64, drops: &Arc<AtomicUsize>) -> Option<Box<Counted>> {
        Some(Box::new(Counted {
            value,
            drops: Arc::clone(drops),
        }))
    }

    #[test]
    fn a_handle_is_one_pointer_and_a_two_byte_heads_prefix_is_eight_bytes() {
        assert_eq!(std::mem::size_of::<Handle>(), 8);
        assert_eq!(std::mem::size_of::<Option<Handle>>(), 8);
        assert_eq!(std::mem::size_of::<Prefix<[u8; 16]>>(), 24);
        let (plain, _, bytes_at) = Handle::layout(10, false);
        assert_eq!((plain.size(), bytes_at), (34, 24));
        let (rare, extras_at, bytes_at) = Handle::layout(10, true);
        assert_eq!((rare.size(), extras_at, bytes_at), (42, 24, 32));
        // The offsets used to read agree with the layouts allocated.
        assert_eq!(Handle::EXTRAS_AT, extras_at);
        assert_eq!((Handle::bytes_at(false), Handle::bytes_at(true)), (24, 32));
        // A message's 2-byte head: an 8-byte prefix, and the rare fields' pointer after it
        // when there is one.
        type Small = Shared<[u8; 2], Counted>;
        assert_eq!(std::mem::size_of::<Prefix<[u8; 2]>>(), 8);
        let (plain, _, bytes_at) = Small::layout(10, false);
        assert_eq!((plain.size(), bytes_at), (18, 8));
        let (rare, extras_at, bytes_at) = Small::layout(10, true);
        assert_eq!((rare.size(), extras_at, bytes_at), (26, 8, 16));
        assert_eq!(Small::EXTRAS_AT, extras_at);
        assert_eq!((Small::bytes_at(false), Small::bytes_at(true)), (8, 16));
        let handle = Small::new([3; 2], counted(7, &Arc::new(AtomicUsize::new(0))), &[b"ab"]);
        assert_eq!((handle.head(), handle.bytes()), (&[3; 2], &b"ab"[..]));
        assert_eq!(handle.extras().map(|extras| extras.value), Some(7));
    }

    #[test]
    fn head_rare_fields_and_bytes_read_back_in_every_layout() {
        let drops = Arc::new(AtomicUsize::new(0));
        for bytes in [&b""[..], b"x", &[7u8; 1000]] {
            let plain = Handle::new([1; 16], None, &[bytes]);
            assert_eq!(plain.head(), &[1; 16]);
            assert!(plain.extras().is_none());
            assert_eq!(plain.bytes(), bytes);
            let (front, back) = bytes.split_at(bytes.len() / 2);
            let rare = Handle::new([2; 16], counted(42, &drops), &[front, back]);
            assert_eq!(rare.head(), &[2; 16]);
            assert_eq!(rare.extras().map(|extras| extras.value), Some(42));
            assert_eq!(rare.bytes(), bytes);
        }
        assert_eq!(
            drops.load(Ordering::SeqCst),
            3,
            "each rare field dropped once"
        );
    }

    #[test]
    fn the_last_handle_frees_the_rare_fields_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let first = Handle::new([0; 16], counted(1, &drops), &[b"abc"]);
        let copies: Vec<Handle> = (0..10).map(|_| first.clone()).collect();
        drop(first);
        let threads: Vec<_> = copies
            .into_iter()
            .map(|copy| {
                std::thread::spawn(move || {
                    assert_eq!(copy.bytes(), b"abc");
                    assert_eq!(copy.extras().map(|extras| extras.value), Some(1));
                })
            })
            .collect();
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        for thread in threads {
            thread.join().expect("reader");
        }
        assert_eq!(drops.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_clone_past_the_share_limit_is_a_copy() {
        let drops = Arc::new(AtomicUsize::new(0));
        let first = Handle::new([5; 16], counted(9, &drops), &[b"shared"]);
        let shared: Vec<Handle> = (1..SHARE_LIMIT).map(|_| first.clone()).collect();
        assert!(shared.iter().all(|handle| handle.ptr == first.ptr));
        assert_eq!(first.prefix().count.load(Ordering::SeqCst), SHARE_LIMIT);
        let copy = first.clone();
        assert_ne!(copy.ptr, first.ptr, "an allocation of its own");
        assert_eq!(first.prefix().count.load(Ordering::SeqCst), SHARE_LIMIT);
        assert_eq!(copy.prefix().count.load(Ordering::SeqCst), 1);
        assert_eq!((copy.head(), copy.bytes()), (&[5; 16], &b"shared"[..]));
        assert_eq!(copy.extras().map(|extras| extras.value), Some(9));
        drop(shared);
        assert_eq!(first.prefix().count.load(Ordering::SeqCst), 1);
        drop(first);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "the shared rare fields");
        drop(copy);
        assert_eq!(drops.load(Ordering::SeqCst), 2, "and the copy's");
    }

    #[test]
    fn an_edit_changes_only_its_own_handle() {
        let drops = Arc::new(AtomicUsize::new(0));
        let original = Handle::new([1; 16], counted(1, &drops), &[b"body"]);
        let mut edited = original.clone();
        edited.edit(|head, extras| {
            head[0] = 9;
            extras.as_mut().expect("present").value = 2;
        });
        assert_eq!((original.head()[0], edited.head()[0]), (1, 9));
        assert_eq!(original.extras().map(|extras| extras.value), Some(1));
        assert_eq!(edited.extras().map(|extras| extras.value), Some(2));
        assert_eq!(edited.bytes(), b"body");
        drop(original);
        drop(edited);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_unique_handle_is_edited_in_place_and_rare_fields_come_and_go() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut handle = Handle::new([1; 16], None, &[b"bo", b"", b"dy"]);
        let before = handle.ptr;
        handle.edit(|head, _| head[1] = 5);
        assert_eq!(handle.ptr, before, "in place");
        assert_eq!(handle.head()[1], 5);
        let fresh = counted(3, &drops);
        handle.edit(|_, extras| *extras = fresh);
        assert_eq!(handle.extras().map(|extras| extras.value), Some(3));
        handle.edit(|_, extras| extras.as_mut().expect("present").value = 4);
        assert_eq!(handle.extras().map(|extras| extras.value), Some(4));
        assert_eq!(drops.load(Ordering::SeqCst), 0);
        handle.edit(|_, extras| *extras = None);
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "removed rare fields dropped"
        );
        assert!(handle.extras().is_none());
        assert_eq!((handle.head()[1], handle.bytes()), (5, &b"body"[..]));
    }

    #[test]
    fn a_panicking_edit_leaves_a_handle_that_drops_cleanly() {
        let drops = Arc::new(AtomicUsize::new(0));
        let mut handle = Handle::new([0; 16], counted(1, &drops), &[b"x"]);
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            handle.edit(|_, _| panic!("in the change"));
        }));
        assert!(outcome.is_err());
        assert_eq!(
            drops.load(Ordering::SeqCst),
            1,
            "the taken rare fields dropped"
        );
        assert!(handle.extras().is_none());
        assert_eq!(handle.bytes(), b"x");
        drop(handle);
        assert_eq!(drops.load(Ordering::SeqCst), 1, "not twice");
    }
}
