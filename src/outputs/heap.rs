//! Gives freed heap back to the kernel after a burst of HTTP clients.
//!
//! glibc's malloc returns memory to the kernel only from the top of a heap; free
//! chunks below a live one stay resident. Measured after 2,000 abusive
//! connections (malloc_stats): the main arena, where the one-thread runtime
//! serves HTTP, held 15.9 MB for 0.18 MB in use, and RSS stayed 14 MB over idle
//! until `malloc_trim(0)`, which also releases whole free pages inside the heap.

/// Returns every whole free page of every arena to the kernel.
pub fn release_free_memory() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: malloc_trim only walks and locks malloc's own arenas; it takes no
    // pointer and is safe to call from any thread at any time.
    unsafe {
        nix::libc::malloc_trim(0);
    }
}
