//! The documentation keeps up with the code: every check id has a page under
//! docs/checks/ (from the template, linked from the README), every config key
//! is documented in etc/rdma-node-agent/config.toml or on its check's page, the
//! packaging asset lists name files that exist, and local links resolve.
//!
//! Check ids come from the real binary (`check --json` on every sample node under
//! tests/fixtures/nodes/: a disabled concern still reports its ids as skipped);
//! config keys from the config parser itself (it rejects unknown keys and names
//! the ones it expects). No hand-kept list.

mod support;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use rdma_node_agent::concerns::registry::SECTIONS;
use rdma_node_agent::config::Config;
use support::{agent, json, node};

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    fs::read_to_string(repo().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Every check id the binary reports on the sample nodes.
fn check_ids() -> BTreeSet<String> {
    let mut ids = BTreeSet::new();
    let nodes = repo().join("tests/fixtures/nodes");
    for entry in fs::read_dir(&nodes).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        let t = node(&name);
        let report = json(&agent(t.path(), &["check", "--json"]));
        for c in report["checks"].as_array().expect("a checks array") {
            ids.insert(c["id"].as_str().expect("an id").to_owned());
        }
    }
    assert!(!ids.is_empty(), "no check reported on {}", nodes.display());
    ids
}

fn page(id: &str) -> PathBuf {
    repo().join("docs/checks").join(format!("{id}.md"))
}

#[test]
fn every_check_has_a_page_from_the_template_linked_from_the_readme() {
    let ids = check_ids();
    let template = read("docs/checks/TEMPLATE.md");
    let sections: Vec<&str> = template.lines().filter(|l| l.starts_with("## ")).collect();
    assert!(sections.len() >= 5, "TEMPLATE.md lost its sections");
    let readme = read("README.md");
    let mut problems = Vec::new();
    for id in &ids {
        let p = page(id);
        let Ok(text) = fs::read_to_string(&p) else {
            problems.push(format!(
                "check {id} has no page: write docs/checks/{id}.md from docs/checks/TEMPLATE.md"
            ));
            continue;
        };
        if text.lines().next() != Some(format!("# `{id}`").as_str()) {
            problems.push(format!("docs/checks/{id}.md must start with \"# `{id}`\""));
        }
        let have: Vec<&str> = text.lines().filter(|l| l.starts_with("## ")).collect();
        let in_order = sections
            .iter()
            .scan(0, |from, s| {
                let at = have[*from..].iter().position(|h| h == s).map(|i| *from + i);
                *from = at.map_or(*from, |i| i + 1);
                Some(at)
            })
            .all(|at| at.is_some());
        if !in_order {
            problems.push(format!(
                "docs/checks/{id}.md lacks the template's sections {sections:?} in order (has {have:?})"
            ));
        }
        if !readme.contains(&format!("(docs/checks/{id}.md)")) {
            problems.push(format!("README.md does not link docs/checks/{id}.md"));
        }
    }
    // And no page for a check that no longer exists.
    for e in fs::read_dir(repo().join("docs/checks")).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if let Some(id) = name.strip_suffix(".md") {
            if id != "TEMPLATE" && !ids.contains(id) {
                problems.push(format!(
                    "docs/checks/{name} documents no check the agent reports (ids: {ids:?})"
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The fields the parser expects in the table at `path` (each segment's bool:
/// an array of tables), or `None` when that table is not a struct (a map, a
/// scalar): learnt from the error `deny_unknown_fields` gives for a probe key.
fn fields(path: &[(String, bool)]) -> Option<Vec<String>> {
    const PROBE: &str = "__docs_probe__";
    let header = if path.is_empty() {
        String::new()
    } else {
        let dotted: Vec<&str> = path.iter().map(|(k, _)| k.as_str()).collect();
        if path.last().unwrap().1 {
            format!("[[{}]]\n", dotted.join("."))
        } else {
            format!("[{}]\n", dotted.join("."))
        }
    };
    let text = format!("{header}{PROBE} = 0\n");
    let err = Config::parse(&text, Path::new("probe.toml"), SECTIONS)
        .err()?
        .to_string();
    let rest = err.split_once(&format!("unknown field `{PROBE}`"))?.1;
    if rest.contains("there are no fields") {
        return Some(Vec::new());
    }
    let expected = rest.split_once("expected")?.1;
    Some(
        expected
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect(),
    )
}

/// Every leaf key of the config (a map table such as `containerd.rlimits` is a leaf).
fn config_keys(prefix: &[(String, bool)], out: &mut Vec<String>) {
    let names = fields(prefix).unwrap_or_else(|| panic!("{prefix:?} is not a table"));
    for name in names {
        let mut path = prefix.to_vec();
        path.push((name, false));
        if fields(&path).is_some() {
            config_keys(&path, out);
            continue;
        }
        path.last_mut().unwrap().1 = true;
        if fields(&path).is_some() {
            config_keys(&path, out);
            continue;
        }
        let dotted: Vec<&str> = path.iter().map(|(k, _)| k.as_str()).collect();
        out.push(dotted.join("."));
    }
}

/// config.toml's text by table (`""` before the first header), commented-out
/// headers and keys included: the file documents defaults as `# key = value`.
fn documented_sections(text: &str) -> BTreeMap<String, Vec<String>> {
    let mut out: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut section = String::new();
    out.insert(section.clone(), Vec::new());
    for line in text.lines() {
        let l = line.trim_start_matches('#').trim();
        let inner = l.trim_start_matches('[').trim_end_matches(']');
        if l.starts_with('[')
            && l.ends_with(']')
            && !inner.is_empty()
            && inner
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            section = inner.to_owned();
            out.entry(section.clone()).or_default();
            continue;
        }
        out.get_mut(&section).unwrap().push(l.to_owned());
    }
    out
}

fn mentions_assignment(lines: &[String], key: &str) -> bool {
    let assign = format!("{key} =");
    lines
        .iter()
        .any(|l| l.starts_with(&assign) || l.contains(&format!(" {assign}")))
}

#[test]
fn every_config_key_is_documented() {
    let mut keys = Vec::new();
    config_keys(&[], &mut keys);
    // The parser must have named the sections this test walks, or it learnt nothing.
    for must in ["mode", "containerd.memlock", "rdma.expect_port.device"] {
        assert!(
            keys.iter().any(|k| k == must),
            "{must} not found in {keys:?}"
        );
    }
    let sections = documented_sections(&read("etc/rdma-node-agent/config.toml"));
    let ids = check_ids();
    let mut undocumented = Vec::new();
    for key in &keys {
        let (parent, leaf) = key.rsplit_once('.').unwrap_or(("", key));
        let in_config = sections.contains_key(key.as_str())
            || sections
                .get(parent)
                .is_some_and(|lines| mentions_assignment(lines, leaf));
        if in_config {
            continue;
        }
        // Else on the page of a check of its section (`rdma.*` keys: rdma.devices, rdma.netns).
        let section = key.split('.').next().unwrap();
        let on_page = ids
            .iter()
            .filter(|id| id.split('.').next() == Some(section))
            .filter_map(|id| fs::read_to_string(page(id)).ok())
            .any(|text| text.contains(&format!("`{key}`")));
        if !on_page {
            undocumented.push(key.clone());
        }
    }
    assert!(
        undocumented.is_empty(),
        "config keys documented neither in etc/rdma-node-agent/config.toml (as `# {{key}} = …` \
         under its [table]) nor, as `section.key`, on a page of its section's checks: {undocumented:?}"
    );
}

#[test]
fn packaging_assets_exist() {
    let manifest: toml::Value = toml::from_str(&read("Cargo.toml")).unwrap();
    let meta = &manifest["package"]["metadata"];
    let mut sources: Vec<String> = meta["deb"]["assets"]
        .as_array()
        .expect("deb assets")
        .iter()
        .map(|a| a[0].as_str().unwrap().to_owned())
        .collect();
    sources.extend(
        meta["generate-rpm"]["assets"]
            .as_array()
            .expect("rpm assets")
            .iter()
            .map(|a| a["source"].as_str().unwrap().to_owned()),
    );
    let mut missing = Vec::new();
    for s in &sources {
        // The binary is built by the packaging scripts, not kept in the tree.
        if s.starts_with("target/") {
            continue;
        }
        let pattern = repo().join(s);
        let found = glob::glob(pattern.to_str().unwrap())
            .unwrap()
            .filter_map(Result::ok)
            .count();
        if found == 0 {
            missing.push(s.clone());
        }
    }
    assert!(
        missing.is_empty(),
        "Cargo.toml packages files that do not exist: {missing:?}"
    );
}

#[test]
fn local_links_resolve() {
    let mut pages = vec![repo().join("README.md"), repo().join("DEVELOPMENT.md")];
    for dir in ["docs", "docs/checks"] {
        for e in fs::read_dir(repo().join(dir)).unwrap() {
            let p = e.unwrap().path();
            if p.extension().is_some_and(|x| x == "md") {
                pages.push(p);
            }
        }
    }
    let mut broken = Vec::new();
    for p in &pages {
        let text = fs::read_to_string(p).unwrap();
        for part in text.split("](").skip(1) {
            let target = part.split(')').next().unwrap();
            let file = target.split('#').next().unwrap();
            if file.is_empty() || file.contains("://") || file.contains(' ') {
                continue;
            }
            if !p.parent().unwrap().join(file).exists() {
                broken.push(format!(
                    "{}: {target}",
                    p.strip_prefix(repo()).unwrap().display()
                ));
            }
        }
    }
    assert!(broken.is_empty(), "links to nothing: {broken:?}");
}

/// docs/reasons.md's table is the registry's: every code a concern declares
/// (in its folder's `reasons.rs`) with its meaning and remedy, and no other.
/// `RDMA_AGENT_BLESS=1 cargo test --test docs` writes it.
#[test]
fn the_reasons_table_is_generated_from_the_registry() {
    use rdma_node_agent::concerns::registry::Registry;
    let (begin, end) = ("<!-- reasons:begin", "<!-- reasons:end -->");
    let path = repo().join("docs/reasons.md");
    let text = read("docs/reasons.md");
    let (Some(b), Some(e)) = (text.find(begin), text.find(end)) else {
        panic!("docs/reasons.md lacks the `{begin} ... -->` and `{end}` markers around its table");
    };
    let b = b + text[b..].find("-->\n").expect("the begin marker closes") + 4;
    let want = Registry::agent().reasons_table().unwrap();
    if std::env::var_os("RDMA_AGENT_BLESS").is_some() {
        fs::write(&path, format!("{}{want}{}", &text[..b], &text[e..])).unwrap();
        return;
    }
    let got = &text[b..e];
    let diff: Vec<String> = got
        .lines()
        .filter(|l| !want.lines().any(|w| w == *l))
        .map(|l| format!("- {l}"))
        .chain(
            want.lines()
                .filter(|w| !got.lines().any(|l| l == *w))
                .map(|w| format!("+ {w}")),
        )
        .collect();
    assert!(
        got == want,
        "docs/reasons.md's table differs from the registry's reasons \
         (edit the concern's reasons.rs, then RDMA_AGENT_BLESS=1 cargo test --test docs):\n{}",
        diff.join("\n")
    );
}
