//! The process's global allocator: the system allocator, except that an allocation whose
//! size is a whole number of pages (4 KiB) gets page alignment. The memory pool's buckets
//! are all page multiples, so every pooled buffer starts on a page boundary, which the
//! kernel can map, pin or hand to io_uring without a bounce copy; everything else is
//! allocated exactly as before.
//!
//! This is the one place Rill writes `unsafe`: a `GlobalAlloc` cannot be implemented
//! without it. Each method forwards to `System` with a layout computed by one pure rule,
//! `adjusted`, so an allocation is always freed with the layout it was made with.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

const PAGE_BYTES: usize = 4096;

pub struct PageAligned;

/// Page-multiple sizes get page alignment; other layouts are unchanged.
fn adjusted(layout: Layout) -> Layout {
    if layout.size() >= PAGE_BYTES && layout.size().is_multiple_of(PAGE_BYTES) && layout.align() < PAGE_BYTES {
        Layout::from_size_align(layout.size(), PAGE_BYTES).unwrap_or(layout)
    } else {
        layout
    }
}

// SAFETY: every method forwards to `System`, which upholds the `GlobalAlloc` contract, with
// `adjusted(layout)`: a layout of the same size and an alignment at least as strict, so
// the memory satisfies the caller's layout; `dealloc` recomputes the same adjusted layout
// from the caller's layout, so memory is returned with the layout it was allocated with.
unsafe impl GlobalAlloc for PageAligned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc(adjusted(layout)) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { System.alloc_zeroed(adjusted(layout)) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, adjusted(layout)) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = adjusted(layout);
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return std::ptr::null_mut();
        };
        let new = adjusted(new_layout);
        if old == layout && new == new_layout {
            // Neither side is page-adjusted: the system's own realloc is correct.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        let fresh = unsafe { System.alloc(new) };
        if !fresh.is_null() {
            // SAFETY: both blocks are valid for the smaller size and do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(ptr, fresh, layout.size().min(new_size));
                System.dealloc(ptr, old);
            }
        }
        fresh
    }
}

#[cfg(test)]
mod tests {
    use rill_application::memory_pool::{BUCKET_SIZES, MemoryPool};

    #[test]
    fn pooled_buffers_start_on_page_boundaries() {
        let pool = MemoryPool::new(1 << 30, 8).expect("pool").leak();
        for &size in BUCKET_SIZES.iter().filter(|&&size| size <= 8 << 20) {
            let buffer = pool.acquire(size - 1);
            assert_eq!(buffer.as_ptr() as usize % 4096, 0, "bucket of {size} bytes");
        }
    }

    #[test]
    fn growing_and_shrinking_keeps_contents() {
        let mut buffer: Vec<u8> = Vec::with_capacity(4096);
        buffer.extend((0..4096).map(|i| i as u8));
        assert_eq!(buffer.as_ptr() as usize % 4096, 0);
        buffer.reserve_exact(4096 * 3);
        assert!((0..4096).all(|i| buffer[i] == i as u8));
        buffer.shrink_to_fit();
        assert!((0..4096).all(|i| buffer[i] == i as u8));
        let odd: Vec<u8> = vec![7; 5000];
        assert!(odd.iter().all(|&b| b == 7));
    }
}
