//! Running a host program with a deadline: a hung `dkms status` (a lock held by
//! a stuck build, a slow NFS /usr/src) must not hold up a reconcile. And a
//! program's own parser on candidate files, in a private directory.

use std::io::{self, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::Host;

/// Why a bounded run did not give an output.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error("cannot run {program}: {source}")]
    Spawn { program: String, source: io::Error },
    #[error("{program} did not finish within {}s (killed)", .after.as_secs())]
    TimedOut { program: String, after: Duration },
}

impl Host {
    /// Like `run`, but kills the program after `timeout`. `None` when not live
    /// or the program is not installed.
    pub fn run_bounded(
        &self,
        program: &str,
        args: &[&str],
        timeout: Duration,
    ) -> Option<Result<Output, RunError>> {
        if !self.is_live() {
            return None;
        }
        let mut child = match Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
        {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return None,
            Err(source) => {
                return Some(Err(RunError::Spawn {
                    program: program.into(),
                    source,
                }));
            }
        };
        // Drain both pipes while waiting, so a chatty program cannot block on a full pipe.
        let drain = |pipe: Option<Box<dyn Read + Send>>| {
            std::thread::spawn(move || {
                let mut buf = Vec::new();
                if let Some(mut p) = pipe {
                    let _ = p.read_to_end(&mut buf);
                }
                buf
            })
        };
        let out = drain(
            child
                .stdout
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let err = drain(
            child
                .stderr
                .take()
                .map(|p| Box::new(p) as Box<dyn Read + Send>),
        );
        let start = Instant::now();
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if start.elapsed() < timeout => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Ok(None) | Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    return Some(Err(RunError::TimedOut {
                        program: program.into(),
                        after: timeout,
                    }));
                }
            }
        };
        Some(Ok(Output {
            status,
            stdout: out.join().unwrap_or_default(),
            stderr: err.join().unwrap_or_default(),
        }))
    }
}

/// The placeholder for the private directory in `run_on_copies`' texts and arguments.
pub const SCRATCH: &str = "{scratch}";

/// Runs `program` on copies of `texts`, written as `0.toml`, `1.toml`, … in a
/// private directory that is removed afterwards (`SCRATCH` in a text or an
/// argument names it; in the output it reads `<candidate>`). Nothing of the
/// host is written: this is how a program's own parser judges candidate files.
pub fn run_on_copies(program: &Path, texts: &[String], args: &[&str]) -> io::Result<Output> {
    let dir = tempfile::tempdir()?;
    let shown = dir.path().to_string_lossy().into_owned();
    for (i, text) in texts.iter().enumerate() {
        std::fs::write(
            dir.path().join(format!("{i}.toml")),
            text.replace(SCRATCH, &shown),
        )?;
    }
    let args: Vec<String> = args.iter().map(|a| a.replace(SCRATCH, &shown)).collect();
    let mut out = Command::new(program)
        .args(&args)
        .stdin(Stdio::null())
        .output()?;
    let hide = |b: &[u8]| {
        String::from_utf8_lossy(b)
            .replace(&shown, "<candidate>")
            .into_bytes()
    };
    out.stdout = hide(&out.stdout);
    out.stderr = hide(&out.stderr);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hung_program_is_killed_at_the_deadline() {
        let host = Host::new("/");
        let start = Instant::now();
        let r = host
            .run_bounded("sleep", &["5"], Duration::from_millis(200))
            .expect("sleep is installed");
        assert!(matches!(r, Err(RunError::TimedOut { .. })), "{r:?}");
        assert!(start.elapsed() < Duration::from_secs(2));
        let out = host
            .run_bounded("echo", &["hi"], Duration::from_secs(5))
            .unwrap()
            .unwrap();
        assert_eq!(out.stdout, b"hi\n");
        assert!(
            Host::new("/tmp")
                .run_bounded("echo", &[], Duration::from_secs(1))
                .is_none()
        );
        assert!(
            host.run_bounded("no-such-program-here", &[], Duration::from_secs(1))
                .is_none()
        );
    }
}
