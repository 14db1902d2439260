//! An allocator for a test binary that counts, for the thread that turns it on, the bytes
//! glibc's malloc holds for the blocks that are live (each block's chunk: header and rounding
//! included), and what a protobuf message holds once prost has decoded it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

use prost::Message;

struct Counting;

thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static LIVE: Cell<isize> = const { Cell::new(0) };
}

/// The memory glibc's malloc takes for a block of `size` bytes on a 64-bit system: its header
/// and 16-byte rounding, at least 32 bytes; a block past the mmap threshold, whole pages.
fn chunk(size: usize) -> isize {
    let bytes = if size >= 128 * 1024 {
        (size + 16).next_multiple_of(4096)
    } else {
        (size + 8).next_multiple_of(16).max(32)
    };
    isize::try_from(bytes).unwrap_or(isize::MAX)
}

fn count(delta: isize) {
    // `try_with`: the thread's locals may be gone while it exits.
    let _ = ON.try_with(|on| {
        if on.get() {
            let _ = LIVE.try_with(|live| live.set(live.get() + delta));
        }
    });
}

// The allocator of the test binary: every call goes to the system's, counted on the way.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(chunk(layout.size()));
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        count(-chunk(layout.size()));
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(chunk(layout.size()));
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(chunk(new_size) - chunk(layout.size()));
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// The bytes the message of `bytes` holds once prost has decoded it as an `M`; `None` where
/// prost refuses it.
pub fn decoded_bytes<M: Message + Default>(bytes: &[u8]) -> Option<usize> {
    ON.set(true);
    LIVE.set(0);
    let message = M::decode(bytes);
    let live = LIVE.get();
    ON.set(false);
    let message = message.ok()?;
    drop(message);
    usize::try_from(live).ok()
}
