//! The one thread every reconcile runs on, for the daemon's whole life.
//!
//! Tokio's blocking pool starts a thread whenever none is idle at the moment
//! of the call: a reconcile handed over while the previous one's thread was
//! still on its way back to idle got a second thread, which then stayed (both
//! kept busy in turn) with a glibc arena of its own. Seen in the long run
//! (tests/long_run.rs): 2 threads after 100 cycles, 3 and +600 KiB RSS after
//! 6,000. Cycles never overlap, so one thread is all they need.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// Why a job handed to the worker gave no result.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// The job panicked (its message); the thread lives on.
    #[error("{0}")]
    Panicked(String),
    #[error("the reconcile thread is gone")]
    Gone,
}

pub struct Worker {
    jobs: mpsc::Sender<Job>,
}

impl Worker {
    pub fn start() -> std::io::Result<Worker> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("reconcile".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })?;
        Ok(Worker { jobs })
    }

    /// Runs `f` on the worker thread; a panic comes back as its message and the
    /// thread lives on for the next cycle.
    pub async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, WorkerError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let out = std::panic::catch_unwind(AssertUnwindSafe(f)).map_err(|p| {
                WorkerError::Panicked(
                    p.downcast_ref::<&str>()
                        .map(|s| (*s).to_owned())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_else(|| "a panic without a message".to_owned()),
                )
            });
            let _ = tx.send(out);
        });
        self.jobs.send(job).map_err(|_| WorkerError::Gone)?;
        rx.await.unwrap_or(Err(WorkerError::Gone))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_id() -> std::thread::ThreadId {
        std::thread::current().id()
    }

    #[tokio::test]
    async fn every_job_runs_on_the_same_thread_even_after_a_panic() {
        let w = Worker::start().unwrap();
        let first = w.run(thread_id).await.unwrap();
        assert_ne!(first, thread_id());
        let err = w.run(|| -> u8 { panic!("boom") }).await.unwrap_err();
        assert_eq!(err, WorkerError::Panicked("boom".into()));
        let name = w
            .run(|| std::thread::current().name().map(str::to_owned))
            .await
            .unwrap();
        assert_eq!(name.as_deref(), Some("reconcile"));
        for _ in 0..100 {
            assert_eq!(w.run(thread_id).await.unwrap(), first);
        }
    }
}
