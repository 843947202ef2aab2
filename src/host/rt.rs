//! The one async runtime of the process. The synchronous core (the CLI, the
//! daemon's reconcile thread) blocks on it for its few async clients (D-Bus,
//! CRI); the daemon runs its endpoint and signals on the same one. A runtime
//! per call cost an epoll set, an eventfd and a timer wheel each time.

use std::future::Future;
use std::sync::{Arc, OnceLock};

use tokio::runtime::{Builder, Runtime};

/// The runtime could not be made (out of file descriptors, or of threads);
/// kept for the process's life, so every later use says the same.
#[derive(Debug, Clone, thiserror::Error)]
#[error("cannot start the async runtime: {0}")]
pub struct RuntimeError(Arc<std::io::Error>);

static RUNTIME: OnceLock<Result<Runtime, RuntimeError>> = OnceLock::new();

/// The process's runtime (current-thread: one thread drives its I/O), made at
/// first use.
pub fn shared() -> Result<&'static Runtime, RuntimeError> {
    RUNTIME
        .get_or_init(|| {
            Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| RuntimeError(Arc::new(e)))
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// Runs `f` to completion from synchronous code. Another thread may be inside
/// `block_on` already (the daemon's main loop): tokio lets them share the
/// runtime, the one holding its driver wakes the other.
pub fn block_on<F: Future>(f: F) -> Result<F::Output, RuntimeError> {
    Ok(shared()?.block_on(f))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_blocks_on_it_while_another_drives_it() {
        let rt = shared().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let other = std::thread::spawn(move || {
            block_on(async {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                tx.send(7).unwrap();
            })
            .unwrap()
        });
        assert_eq!(rt.block_on(rx).unwrap(), 7);
        other.join().unwrap();
    }
}
