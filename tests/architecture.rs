//! The layout's rules, checked on the source's words: the engine names no
//! concern, no module gives another's items a second name, and files stay small
//! enough to read. Each failure names the file and line. The module graph (no
//! circle, no concern naming another) is read as the compiler parses it, in
//! tests/architecture_graph.rs.

use std::path::{Path, PathBuf};

fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(sources(&p));
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// (file, line number, line) of every line matching `hit`.
fn lines_where(files: &[PathBuf], hit: impl Fn(&Path, &str) -> bool) -> Vec<String> {
    let mut out = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for (i, l) in text.lines().enumerate() {
            if hit(f, l) {
                out.push(format!("{}:{}: {}", f.display(), i + 1, l.trim()));
            }
        }
    }
    out
}

#[test]
fn the_engine_names_no_concern() {
    // Words only a concern would use; "systemd" and "kernel" are the engine's
    // own vocabulary (it restarts units, it holds back kernel switches).
    let words = [
        "containerd",
        "gpudirect",
        "kubelet",
        "netns",
        "initramfs",
        "nfd",
        "dkms",
        "concerns::",
    ];
    let hits = lines_where(&sources(&src().join("engine")), |_, l| {
        let l = l.to_lowercase();
        words.iter().any(|w| l.contains(w))
    });
    assert!(
        hits.is_empty(),
        "the engine names a concern:\n{}",
        hits.join("\n")
    );
    let agent = lines_where(&sources(&src().join("agent")), |_, l| {
        l.contains("concerns::")
            && !l.contains("concerns::ALL")
            && !l.contains("concerns::legacy_readers")
            && !l.trim_start().starts_with("use crate::concerns;")
    });
    assert!(
        agent.is_empty(),
        "agent/ names a concern:\n{}",
        agent.join("\n")
    );
}

#[test]
fn no_module_gives_anothers_items_a_second_name() {
    // `pub use child::item` publishes a private child's item under its parent
    // (one name); `pub use crate::…` or `pub use super::…` is a second name.
    let hits = lines_where(&sources(&src()), |_, l| {
        let l = l.trim_start();
        l.starts_with("pub use crate::") || l.starts_with("pub use super::")
    });
    assert!(hits.is_empty(), "alias re-exports:\n{}", hits.join("\n"));
}

#[test]
fn files_stay_small_enough_to_read() {
    let long: Vec<String> = sources(&src())
        .into_iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(&f).unwrap().lines().count();
            (n > 520).then(|| format!("{}: {n} lines", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "over ~500 lines:\n{}", long.join("\n"));
}
