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

/// Every function of non-test code, with its length in lines (from `fn` to
/// its closing brace), as syn parses the file.
#[derive(Default)]
struct Functions {
    file: PathBuf,
    found: Vec<(usize, String)>,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("test")
            || (a.path().is_ident("cfg")
                && a.parse_args::<syn::Meta>()
                    .is_ok_and(|m| m.path().is_ident("test")))
    })
}

impl Functions {
    fn push(&mut self, name: &syn::Ident, fn_token: &syn::token::Fn, block: &syn::Block) {
        let (start, end) = (
            fn_token.span.start().line,
            block.brace_token.span.close().end().line,
        );
        let at = format!("{}:{start}", self.file.display());
        self.found.push((end + 1 - start, format!("{at} {name}")));
    }
}

impl<'ast> syn::visit::Visit<'ast> for Functions {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_test(&f.attrs) {
            self.push(&f.sig.ident, &f.sig.fn_token, &f.block);
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            self.push(&f.sig.ident, &f.sig.fn_token, &f.block);
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(block) = &f.default {
            self.push(&f.sig.ident, &f.sig.fn_token, block);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// A function is read in one screen: none of non-test code is over 80
/// lines (split it along its steps: named helpers, a small struct where
/// state is threaded). Test files (`tests.rs`, `*_tests.rs`, included under
/// `#[cfg(test)]`) and `#[cfg(test)]` items are not held to it.
#[test]
fn no_function_is_over_80_lines() {
    use syn::visit::Visit;
    let mut long = Vec::new();
    for f in sources(&src()) {
        let name = f.file_name().unwrap().to_string_lossy();
        if name == "tests.rs" || name.ends_with("_tests.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&f).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut v = Functions {
            file: f.clone(),
            ..Functions::default()
        };
        v.visit_file(&file);
        long.extend(
            v.found
                .into_iter()
                .filter(|(n, _)| *n > 80)
                .map(|(n, at)| format!("{at}: {n} lines")),
        );
    }
    assert!(
        long.is_empty(),
        "functions over 80 lines:\n{}",
        long.join("\n")
    );
}
