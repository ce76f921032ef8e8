//! Handing heap memory that background work has freed back to the operating system.
//!
//! glibc's allocator raises its mmap threshold to the size of every large block it frees (up to
//! 32 MiB) and its trim threshold to twice that. After the first flush frees its buffers, the
//! SSTable indexes, bloom filters and other buffers a flush or compaction builds and frees
//! come from the heap (a flushed memstore's full-size chunks go to the chunk pool instead, up to
//! its size, see `memstore::account`), and the freed space stays resident in each worker
//! thread's arena: tens of MiB that no memory budget accounts for. Trimming after each
//! background task returns it, so resident memory stays within the memstore and block-cache
//! budgets. Other platforms and allocators return memory on their own terms; there this does
//! nothing.

/// Returns free heap pages to the operating system (glibc only).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
pub(crate) fn release_free_memory() {
    #[expect(unsafe_code, reason = "FFI call into the C allocator")]
    // SAFETY: malloc_trim takes the allocator's own locks and only gives back pages of free
    // chunks; no memory the program holds is touched. Its result (whether anything was
    // released) needs no handling.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Returns free heap pages to the operating system (glibc only).
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
pub(crate) fn release_free_memory() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Trimming while other threads allocate and free leaves their data intact.
    #[test]
    fn trimming_alongside_allocating_threads_keeps_their_data() {
        let workers: Vec<_> = (0..4u8)
            .map(|t| {
                std::thread::spawn(move || {
                    for round in 0..50u32 {
                        // Large blocks (which move glibc's thresholds) and small ones.
                        let big = vec![t; 4 << 20];
                        let small: Vec<Vec<u8>> = (0..256).map(|i| vec![t ^ (i as u8); 4096]).collect();
                        drop(big);
                        let keep = vec![t.wrapping_add(round as u8); 1 << 20];
                        assert!(small.iter().enumerate().all(|(i, b)| b.iter().all(|&x| x == t ^ (i as u8))));
                        assert!(keep.iter().all(|&x| x == t.wrapping_add(round as u8)));
                    }
                })
            })
            .collect();
        for _ in 0..50 {
            release_free_memory();
        }
        for w in workers {
            w.join().expect("allocating thread");
        }
    }
}
