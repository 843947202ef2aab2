//! The daemon's stop request, seen by everything that waits: a reconcile that
//! waits on systemd for a restart job must give up when systemd is stopping the
//! agent itself, or the two jobs wait on each other until SIGKILL.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// Cloned into every waiter; set once on SIGTERM/SIGINT.
#[derive(Debug, Clone, Default)]
pub struct Stop(Arc<AtomicBool>);

/// How often a waiter looks at the flag: the stop budget is 2 s in all.
pub const POLL: Duration = Duration::from_millis(50);

impl Stop {
    pub fn new() -> Self {
        Stop::default()
    }

    pub fn request(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn requested(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    /// Sleeps `d`, or less when a stop is requested meanwhile. True when stopped.
    pub fn sleep(&self, d: Duration) -> bool {
        let end = Instant::now() + d;
        loop {
            if self.requested() {
                return true;
            }
            let now = Instant::now();
            if now >= end {
                return false;
            }
            std::thread::sleep(POLL.min(end - now));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sleep_ends_early_on_stop() {
        let s = Stop::new();
        assert!(!s.sleep(Duration::from_millis(10)));
        let t = s.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            t.request();
        });
        let start = Instant::now();
        assert!(s.sleep(Duration::from_secs(10)));
        assert!(start.elapsed() < Duration::from_secs(1));
    }
}
