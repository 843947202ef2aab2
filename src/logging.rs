//! The process's log output: journald, with structured fields, when systemd
//! connected stderr to the journal; stderr otherwise (moved from `main.rs`,
//! unchanged, to keep that file small).

/// Logs go to journald, with structured fields, when systemd connected our output
/// to the journal; to stderr otherwise.
pub fn init(serve: bool) {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::prelude::*;
    let default = if serve {
        LevelFilter::INFO
    } else {
        LevelFilter::WARN
    };
    // `RUST_LOG=debug` or `RUST_LOG=warn,rdma_node_agent=debug`: targets and levels
    // (Targets, not EnvFilter, whose regex engine would double the code paged in).
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) => spec.parse::<Targets>().unwrap_or_else(|e| {
            eprintln!("RUST_LOG={spec:?} ignored: {e}");
            Targets::new().with_default(default)
        }),
        Err(_) => Targets::new().with_default(default),
    };
    let journald = stderr_is_journal()
        .then(|| tracing_journald::layer().ok())
        .flatten();
    let registry = tracing_subscriber::registry().with(filter);
    match journald {
        Some(j) => registry.with(j).init(),
        None => registry
            .with(
                tracing_subscriber::fmt::layer()
                    .with_writer(std::io::stderr)
                    .with_ansi(stderr_color(
                        std::io::IsTerminal::is_terminal(&std::io::stderr()),
                        std::env::var_os("NO_COLOR").as_deref(),
                    )),
            )
            .init(),
    }
}

/// Colour only for a person at a terminal: never into pipes, files or the
/// journal, and not when `NO_COLOR` is set to anything (no-color.org).
fn stderr_color(is_terminal: bool, no_color: Option<&std::ffi::OsStr>) -> bool {
    is_terminal && no_color.is_none_or(|v| v.is_empty())
}

/// systemd sets `JOURNAL_STREAM=<dev>:<inode>` for a unit whose output goes to
/// the journal; a child that inherited the variable but not the stream (a shell
/// started from a unit, redirecting stderr) must log to its stderr instead.
fn stderr_is_journal() -> bool {
    use std::os::unix::fs::MetadataExt;
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|v| v.split_once(':')) else {
        return false;
    };
    let fd = std::io::stderr();
    let Ok(meta) = std::os::fd::AsFd::as_fd(&fd)
        .try_clone_to_owned()
        .map(std::fs::File::from)
        .and_then(|f| f.metadata())
    else {
        return false;
    };
    dev.parse() == Ok(meta.dev()) && ino.parse() == Ok(meta.ino())
}
