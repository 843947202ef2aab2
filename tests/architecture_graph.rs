//! The module graph as the compiler sees it: every file under src/ parsed with
//! syn from `lib.rs` down its `mod` declarations (`#[path]` included), every
//! path in non-test code (`use` trees, types, expressions, macros' paths)
//! resolved against its module (`crate::`, `super::`, `self::`, a child
//! module's name). Two rules hold on that graph, where a grep of the text
//! could not tell a `use` from a comment or follow `super::super::`:
//! - no circle between top-level modules (`host`, `engine`, `concerns`, ...);
//! - no concern names another (`concerns::<a>` → `concerns::<b>`); they meet
//!   through the engine: check ids and typed observations.
//!
//! `#[cfg(test)]` items and modules are left out: a test may build another
//! module's values.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// One reference: from module `from` (its path) to the absolute path `to`.
struct Edge {
    from: Vec<String>,
    to: Vec<String>,
    at: String,
}

struct Crate {
    /// Every module's path, from `lib.rs` down.
    modules: BTreeSet<Vec<String>>,
    edges: Vec<Edge>,
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg") && {
            let t = a.meta.require_list().map(|l| l.tokens.to_string());
            t.is_ok_and(|t| {
                t.split(|c: char| !c.is_alphanumeric() && c != '_')
                    .any(|w| w == "test")
            })
        }
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs
        .iter()
        .find(|a| a.path().is_ident("path"))
        .and_then(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
}

/// Collects the paths one module's own items name (not its child modules').
struct Paths<'a> {
    file: &'a Path,
    found: Vec<(Vec<String>, usize)>,
}

impl Paths<'_> {
    fn push(&mut self, segs: Vec<String>, line: usize) {
        if !segs.is_empty() {
            self.found.push((segs, line));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, t: &syn::UseTree) {
        match t {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut s = prefix.clone();
                if n.ident != "self" {
                    s.push(n.ident.to_string());
                }
                self.push(s, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut s = prefix.clone();
                s.push(r.ident.to_string());
                self.push(s, r.ident.span().start().line);
            }
            syn::UseTree::Glob(g) => self.push(prefix.clone(), g.star_token.spans[0].start().line),
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }
}

impl<'ast> Visit<'ast> for Paths<'_> {
    fn visit_item_mod(&mut self, _: &'ast syn::ItemMod) {
        // A child module is read as its own module (`walk`).
    }
    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if !is_cfg_test(&u.attrs) {
            self.use_tree(&mut Vec::new(), &u.tree);
        }
    }
    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        if !is_cfg_test(&f.attrs) {
            syn::visit::visit_item_fn(self, f);
        }
    }
    fn visit_item_impl(&mut self, i: &'ast syn::ItemImpl) {
        if !is_cfg_test(&i.attrs) {
            syn::visit::visit_item_impl(self, i);
        }
    }
    fn visit_path(&mut self, p: &'ast syn::Path) {
        let segs = p.segments.iter().map(|s| s.ident.to_string()).collect();
        let line = p
            .segments
            .first()
            .map_or(0, |s| s.ident.span().start().line);
        self.push(segs, line);
        syn::visit::visit_path(self, p);
    }
    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        // Paths inside a macro's tokens (`matches!(x, crate::a::B)`), where they parse as an expression list.
        let parsed = m.parse_body_with(
            syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated,
        );
        if let Ok(args) = parsed {
            for a in &args {
                self.visit_expr(a);
            }
        }
    }
}

impl Crate {
    fn read(src: &Path) -> Crate {
        let mut c = Crate {
            modules: BTreeSet::new(),
            edges: Vec::new(),
        };
        c.walk_file(&src.join("lib.rs"), src, Vec::new());
        c
    }

    fn walk_file(&mut self, file: &Path, dir: &Path, module: Vec<String>) {
        let text =
            std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        let ast = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
        self.walk_items(file, dir, module, &ast.items);
    }

    /// `dir`: where this module's non-inline children live.
    fn walk_items(&mut self, file: &Path, dir: &Path, module: Vec<String>, items: &[syn::Item]) {
        self.modules.insert(module.clone());
        let mut paths = Paths {
            file,
            found: Vec::new(),
        };
        for item in items {
            paths.visit_item(item);
        }
        let children: BTreeSet<String> = items
            .iter()
            .filter_map(|i| match i {
                syn::Item::Mod(m) => Some(m.ident.to_string()),
                _ => None,
            })
            .collect();
        for (segs, line) in paths.found {
            if let Some(to) = resolve(&module, &children, &segs) {
                let at = format!("{}:{line}", paths.file.display());
                self.edges.push(Edge {
                    from: module.clone(),
                    to,
                    at,
                });
            }
        }
        for item in items {
            let syn::Item::Mod(m) = item else { continue };
            if is_cfg_test(&m.attrs) {
                continue;
            }
            let mut child = module.clone();
            child.push(m.ident.to_string());
            let name = m.ident.to_string();
            match (&m.content, path_attr(&m.attrs)) {
                (Some((_, inner)), _) => self.walk_items(file, &dir.join(&name), child, inner),
                (None, Some(p)) => {
                    let f = file.parent().unwrap().join(p);
                    let d = f.parent().unwrap().to_owned();
                    self.walk_file(&f, &d, child);
                }
                (None, None) => {
                    let flat = dir.join(format!("{name}.rs"));
                    let (f, d) = if flat.exists() {
                        (flat, dir.join(&name))
                    } else {
                        (dir.join(&name).join("mod.rs"), dir.join(&name))
                    };
                    self.walk_file(&f, &d, child);
                }
            }
        }
    }
}

/// The absolute module path a path names, when it names one of this crate's.
fn resolve(module: &[String], children: &BTreeSet<String>, segs: &[String]) -> Option<Vec<String>> {
    let mut base: Vec<String> = match segs.first()?.as_str() {
        "crate" => Vec::new(),
        "self" => module.to_vec(),
        "super" => module.to_vec(),
        first if children.contains(first) => module.to_vec(),
        _ => return None,
    };
    let mut rest = segs;
    if rest[0] == "crate" || rest[0] == "self" {
        rest = &rest[1..];
    }
    while rest.first().is_some_and(|s| s == "super") {
        base.pop()?;
        rest = &rest[1..];
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The unit a module belongs to for the circle rule: its top-level module.
fn top(path: &[String], modules: &BTreeSet<Vec<String>>) -> Option<String> {
    let first = path.first()?;
    modules
        .contains(&vec![first.clone()])
        .then(|| first.clone())
}

/// The concern a module belongs to: `concerns::<name>` below the registry
/// (`concerns` itself and `concerns::registry`, which read `ALL`).
fn concern(path: &[String]) -> Option<&str> {
    (path.len() >= 2 && path[0] == "concerns" && path[1] != "registry").then(|| path[1].as_str())
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Strongly connected components of size > 1 (Tarjan's, on a small graph).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    // Reachability closure: small enough (a dozen nodes) to do plainly.
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<_, _> = graph.keys().map(|k| (k.clone(), reach(k))).collect();
    let mut out: Vec<Vec<String>> = Vec::new();
    for (a, ra) in &reaches {
        let comp: Vec<String> = reaches
            .iter()
            .filter(|(b, rb)| ra.contains(*b) && rb.contains(a))
            .map(|(b, _)| b.clone())
            .collect();
        if comp.len() > 1 && !out.contains(&comp) {
            out.push(comp);
        }
    }
    out
}

#[test]
fn no_circle_between_top_level_modules() {
    let c = Crate::read(&src());
    assert!(
        c.modules.len() > 50,
        "read only {} modules: the walk is broken",
        c.modules.len()
    );
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut why: BTreeMap<(String, String), String> = BTreeMap::new();
    for e in &c.edges {
        let (Some(a), Some(b)) = (top(&e.from, &c.modules), top(&e.to, &c.modules)) else {
            continue;
        };
        graph.entry(b.clone()).or_default();
        if a != b {
            graph.entry(a.clone()).or_default().insert(b.clone());
            why.entry((a, b))
                .or_insert_with(|| format!("{} ({})", e.at, e.to.join("::")));
        }
    }
    let found = circles(&graph);
    let mut report = Vec::new();
    for comp in &found {
        report.push(format!("circle: {}", comp.join(" ↔ ")));
        for ((a, b), at) in &why {
            if comp.contains(a) && comp.contains(b) {
                report.push(format!("  {a} → {b}: {at}"));
            }
        }
    }
    assert!(found.is_empty(), "{}", report.join("\n"));
    // The graph itself, for docs/architecture.md's order.
    for (a, bs) in &graph {
        println!(
            "{a} → {}",
            bs.iter().cloned().collect::<Vec<_>>().join(", ")
        );
    }
}

#[test]
fn no_concern_names_another() {
    let c = Crate::read(&src());
    let hits: Vec<String> = c
        .edges
        .iter()
        .filter_map(|e| {
            let (a, b) = (concern(&e.from)?, concern(&e.to)?);
            (a != b).then(|| format!("{}: concerns::{a} names {}", e.at, e.to.join("::")))
        })
        .collect();
    assert!(
        hits.is_empty(),
        "a concern names another:\n{}",
        hits.join("\n")
    );
}

/// The walk sees what it must: a `super::` path, a child module, a path in a
/// macro, and nothing under `#[cfg(test)]`.
#[test]
fn the_walk_resolves_paths_as_the_compiler_does() {
    let m: Vec<String> = ["concerns", "rdma", "link"].map(String::from).to_vec();
    let none = BTreeSet::new();
    let sup = ["super", "super", "kernel", "X"].map(String::from);
    assert_eq!(
        resolve(&m, &none, &sup).unwrap(),
        ["concerns", "kernel", "X"]
    );
    let kids: BTreeSet<String> = ["history".to_owned()].into();
    let child = ["history", "History"].map(String::from);
    assert_eq!(
        resolve(&m, &kids, &child).unwrap(),
        ["concerns", "rdma", "link", "history", "History"]
    );
    assert!(resolve(&m, &none, &["std".to_owned(), "fs".to_owned()]).is_none());
    let c = Crate::read(&src());
    // A path in an expression, inside a closure: driver.health names the PCI
    // address check inline (`crate::host::pci_config::is_bdf(last)`). (It was
    // rdma.link's inline call into rdma.devices, which now reads the port
    // state from the RDMA inventory.)
    let driver: Vec<String> = ["concerns", "driver"].map(String::from).to_vec();
    assert!(
        c.edges.iter().any(|e| {
            e.from == driver && e.to.starts_with(&["host".into(), "pci_config".into()])
        })
    );
    // Test modules are not walked.
    assert!(
        !c.modules
            .iter()
            .any(|p| p.last().is_some_and(|l| l == "tests"))
    );
}
