//! The containerd concern on a corpus of real configs (tests/fixtures/real-world/<case>,
//! each with its PROVENANCE): `apply --no-restart`, then containerd's own
//! `containerd config dump` of the applied files must show every CRI handler with a
//! base spec at the target, `plan` is clean, a second apply changes nothing and
//! `revert` gives back the tree byte for byte, modes, owners and links included.
//!
//! Which containerd judges (and reads it: the agent is told via `daemon_version`,
//! as `containerd --version` would tell it live): the case's `daemon` (the major that reads it on its
//! distribution). 1: Debian's containerd (1.6, installed by test.sh) and, when
//! present, 1.7; 2: containerd 2.1. The 1.7 and 2.1 binaries come from Debian's
//! packages, unpacked by scripts/fetch-containerd.sh into the cache (test.sh runs it).

mod support;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;
use support::*;

const TARGET: u64 = u64::MAX;

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    daemon: u32,
    unit: String,
    #[serde(default = "default_config")]
    config: String,
    template: Option<String>,
    handlers: Vec<String>,
}

fn default_config() -> String {
    "/etc/containerd/config.toml".into()
}

fn corpus() -> PathBuf {
    fixtures().join("real-world")
}

/// Every entry under a root as lstat sees it: type, mode, owner, and the bytes
/// of a file or the target of a link.
fn lstat_tree(root: &Path) -> BTreeMap<PathBuf, String> {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, String>) {
        for e in fs::read_dir(dir).unwrap() {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(base).unwrap().to_owned();
            if rel.starts_with("var/lib/rdma-node-agent") || rel.starts_with("run/rdma-node-agent")
            {
                continue;
            }
            let m = fs::symlink_metadata(&p).unwrap();
            let who = format!("{:o} {}:{}", m.mode(), m.uid(), m.gid());
            let what = if m.file_type().is_symlink() {
                format!("link -> {}", fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                walk(base, &p, out);
                "dir".to_owned()
            } else {
                format!("file {:?}", String::from_utf8_lossy(&fs::read(&p).unwrap()))
            };
            out.insert(rel, format!("{who} {what}"));
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    // Directories the agent made for its own state only (var/lib, run) are its own.
    for d in ["var/lib", "var", "run"] {
        let p = root.join(d);
        if p.is_dir()
            && fs::read_dir(&p).unwrap().all(|e| {
                let n = e.unwrap().path();
                let rel = n.strip_prefix(root).unwrap().to_owned();
                rel.starts_with("var/lib/rdma-node-agent")
                    || rel.starts_with("run/rdma-node-agent")
                    || rel == Path::new("var/lib")
            })
        {
            out.remove(Path::new(d));
        }
    }
    out
}

/// The containerd binaries of one major: (label, path), those present here.
fn binaries(daemon: u32) -> Vec<(String, PathBuf)> {
    let cache = std::env::var_os("RDMA_AGENT_CONTAINERD_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| "/var/cache/rdma-node-agent/containerd".into());
    let mut out = Vec::new();
    if daemon == 1 && have_containerd() {
        out.push((
            "Debian's containerd".to_owned(),
            PathBuf::from("containerd"),
        ));
    }
    // The cache names each by major.minor (scripts/fetch-containerd.sh).
    let mut versions: Vec<String> = fs::read_dir(&cache)
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|n| n.split('.').next() == Some(daemon.to_string().as_str()))
                .collect()
        })
        .unwrap_or_default();
    versions.sort();
    for v in versions {
        let p = cache.join(&v).join("containerd");
        if p.exists() {
            out.push((format!("containerd {v}"), p));
        }
    }
    if out.is_empty() && std::env::var_os("RDMA_AGENT_REQUIRE_CONTAINERD").is_some() {
        panic!(
            "no containerd {daemon}.x to check with: run scripts/fetch-containerd.sh (scripts/test.sh does)"
        );
    }
    out
}

/// The main config with its imports pointed inside the root (containerd 2.x's
/// default conf.d included), so the dump reads the tree, never the host's /etc.
fn dump(bin: &Path, root: &Path, config: &str, daemon: u32) -> Result<String, String> {
    let main = root.join(config.trim_start_matches('/'));
    let text = fs::read_to_string(&main).unwrap();
    let mut doc: toml_edit::DocumentMut = text.parse().unwrap();
    let version = doc.get("version").and_then(|v| v.as_integer()).unwrap_or(1);
    let imports: Vec<String> = match doc.get("imports").and_then(|i| i.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|v| v.as_str())
            .map(str::to_owned)
            .collect(),
        None if version >= 3 && daemon >= 2 => vec!["/etc/containerd/conf.d/*.toml".into()],
        None => vec![],
    };
    let dir = main.parent().unwrap();
    let inside: toml_edit::Array = imports
        .iter()
        .map(|i| {
            if i.starts_with('/') {
                root.join(i.trim_start_matches('/'))
            } else {
                dir.join(i)
            }
            .to_string_lossy()
            .into_owned()
        })
        .collect();
    doc["imports"] = toml_edit::value(inside);
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("config.toml");
    fs::write(&copy, doc.to_string()).unwrap();
    let out = Command::new(bin)
        .arg("--config")
        .arg(&copy)
        .args(["config", "dump"])
        .output()
        .unwrap();
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// From a dump: every CRI handler containerd will use (legacy `default_runtime`
/// and `untrusted_workload_runtime` tables with a runtime type included, as
/// containerd 1.x's CRI turns them into handlers) and its base_runtime_spec.
fn handlers_in_dump(dump: &str) -> BTreeMap<String, String> {
    let t: toml::Table = dump.parse().expect("a dump is TOML");
    let plugins = &t["plugins"];
    let containerd = ["io.containerd.grpc.v1.cri", "io.containerd.cri.v1.runtime"]
        .iter()
        .find_map(|k| plugins.get(k)?.get("containerd"))
        .expect("a CRI plugin section in the dump");
    let mut out = BTreeMap::new();
    let spec = |r: &toml::Value| {
        r.get("base_runtime_spec")
            .and_then(toml::Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    if let Some(rs) = containerd.get("runtimes").and_then(toml::Value::as_table) {
        for (name, r) in rs {
            let ty = r
                .get("runtime_type")
                .and_then(toml::Value::as_str)
                .unwrap_or("");
            if !ty.contains("runhcs") {
                out.insert(name.clone(), spec(r));
            }
        }
    }
    for (key, name) in [
        ("default_runtime", "default"),
        ("untrusted_workload_runtime", "untrusted"),
    ] {
        if let Some(r) = containerd.get(key) {
            if r.get("runtime_type")
                .and_then(toml::Value::as_str)
                .is_some_and(|s| !s.is_empty())
            {
                out.insert(name.to_owned(), spec(r));
            }
        }
    }
    out
}

/// A host path's file under `root`, following links as containerd on that node
/// would: an absolute target is under the root too.
fn in_root(root: &Path, path: &str) -> PathBuf {
    let mut p = root.join(path.trim_start_matches('/'));
    for _ in 0..8 {
        match fs::read_link(&p) {
            Ok(t) if t.is_absolute() => p = root.join(t.strip_prefix("/").unwrap()),
            Ok(t) => p = p.parent().unwrap().join(t),
            Err(_) => break,
        }
    }
    p
}

fn memlock_of(root: &Path, spec: &str) -> Option<(u64, u64)> {
    let text = fs::read_to_string(in_root(root, spec)).ok()?;
    let v: Value = serde_json::from_str(&text).ok()?;
    v.pointer("/process/rlimits")?
        .as_array()?
        .iter()
        .find(|r| r["type"] == "RLIMIT_MEMLOCK")
        .map(|r| {
            (
                r["soft"].as_u64().unwrap_or(0),
                r["hard"].as_u64().unwrap_or(0),
            )
        })
}

/// One case; the failures it found (empty: it passed). `prepare` may change the
/// copied tree first (a variant of a real case).
fn run_case(name: &str, prepare: &dyn Fn(&Path)) -> Vec<String> {
    let dir = corpus().join(name);
    let case: Case = toml::from_str(&fs::read_to_string(dir.join("case.toml")).unwrap())
        .unwrap_or_else(|e| panic!("{name}/case.toml: {e}"));
    assert!(dir.join("PROVENANCE").exists(), "{name}: no PROVENANCE");
    let t = tempfile::tempdir().unwrap();
    let root = t.path();
    copy_tree(&dir.join("root"), root);
    prepare(root);
    // This corpus is about containerd; the LimitMEMLOCK drop-in has its own tests.
    // The containerd major is what `containerd --version` tells the agent on a live
    // node (a --root tree runs no host binary); without it a config that 1.x and
    // 2.x read differently is `unknown` (tests/containerd.rs covers that).
    write(
        root,
        "/etc/rdma-node-agent/config.toml",
        &format!(
            "[systemd]\nenabled = false\n[containerd]\ndaemon_version = {}\n",
            case.daemon
        ),
    );
    let before = lstat_tree(root);
    let mut fails = Vec::new();
    let mut fail = |m: String| fails.push(m);

    let plan = agent(root, &["plan"]);
    let text = stdout(&plan);
    if plan.status.code() != Some(0) {
        fail(format!("plan failed: {}{}", text, stderr(&plan)));
        return fails;
    }
    if !text.contains(&format!("action: restart {} (", case.unit)) {
        fail(format!("plan does not restart {}:\n{text}", case.unit));
    }
    let restarts = text.matches("action: restart").count();
    if restarts != 1 {
        fail(format!(
            "plan restarts {restarts} units, not just {}:\n{text}",
            case.unit
        ));
    }

    let o = agent(root, &["apply", "--no-restart"]);
    if o.status.code() != Some(0) {
        fail(format!("apply failed: {}{}", stdout(&o), stderr(&o)));
        return fails;
    }
    let applied = stdout(&o);

    // containerd's own view of what it will read.
    for (label, bin) in binaries(case.daemon) {
        match dump(&bin, root, &case.config, case.daemon) {
            Err(e) => fail(format!(
                "{label} config dump fails on the applied config: {e}"
            )),
            Ok(d) => {
                let found = handlers_in_dump(&d);
                let names: Vec<&String> = found.keys().collect();
                if names != case.handlers.iter().collect::<Vec<_>>() {
                    fail(format!(
                        "{label}: effective handlers {names:?}, the case expects {:?}; evidence: {found:?}",
                        case.handlers
                    ));
                }
                for (h, spec) in &found {
                    match memlock_of(root, spec) {
                        Some((s, hd)) if s == TARGET && hd == TARGET => {}
                        other => fail(format!(
                            "{label}: handler {h} has base_runtime_spec {spec:?} with memlock {other:?} (evidence: {found:?})"
                        )),
                    }
                }
            }
        }
    }
    // The template a distribution regenerates the config from carries it too.
    if let Some(tmpl) = &case.template {
        let text = read(root, tmpl);
        let doc: toml::Table = text.parse().unwrap();
        let plugins = &doc["plugins"];
        let containerd = [
            "io.containerd.grpc.v1.cri",
            "cri",
            "io.containerd.cri.v1.runtime",
        ]
        .iter()
        .find_map(|k| plugins.get(k)?.get("containerd"))
        .unwrap();
        let mut tables: Vec<(String, &toml::Value)> = containerd
            .get("runtimes")
            .and_then(toml::Value::as_table)
            .map(|t| t.iter().map(|(k, v)| (k.clone(), v)).collect())
            .unwrap_or_default();
        if let Some(d) = containerd.get("default_runtime") {
            tables.push(("default_runtime".into(), d));
        }
        for (h, r) in tables {
            let ty = r
                .get("runtime_type")
                .and_then(toml::Value::as_str)
                .unwrap_or("");
            let spec = r.get("base_runtime_spec").and_then(toml::Value::as_str);
            if !ty.is_empty() && spec.is_none() {
                fail(format!(
                    "template {tmpl}: handler {h} has no base_runtime_spec:\n{text}"
                ));
            }
        }
    }

    let again = agent(root, &["plan", "--exit-code"]);
    if again.status.code() != Some(0) {
        fail(format!("not converged after apply: {}", stdout(&again)));
    }
    let second = agent(root, &["apply", "--no-restart"]);
    if stdout(&second).trim() != "No changes: the node is converged." {
        fail(format!(
            "second apply changed something: {}",
            stdout(&second)
        ));
    }
    let check = json(&agent(root, &["check", "--json"]));
    let memlock = check["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["id"] == "containerd.memlock")
        .cloned()
        .unwrap_or_default();
    let mut reported: Vec<String> = memlock["details"]["handlers"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|h| h["handler"].as_str().unwrap_or("?").to_owned())
                .collect()
        })
        .unwrap_or_default();
    reported.sort();
    if reported != case.handlers {
        fail(format!("check reports handlers {reported:?}: {memlock}"));
    }
    if memlock["status"] == "ok" {
        fail(format!(
            "ok although containerd is not running here: {memlock}"
        ));
    }

    let r = agent(root, &["revert"]);
    if r.status.code() != Some(0) {
        fail(format!("revert failed: {}{}", stdout(&r), stderr(&r)));
    }
    let after = lstat_tree(root);
    if after != before {
        let keys: std::collections::BTreeSet<&PathBuf> =
            before.keys().chain(after.keys()).collect();
        let diff: Vec<String> = keys
            .into_iter()
            .filter(|k| before.get(*k) != after.get(*k))
            .map(|k| format!("{}: {:?} -> {:?}", k.display(), before.get(k), after.get(k)))
            .collect();
        fail(format!(
            "revert is not exact:\n{}\n(apply said: {applied})",
            diff.join("\n")
        ));
    }
    fails
}

#[test]
fn every_real_world_case() {
    let mut names: Vec<String> = fs::read_dir(corpus())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert!(names.len() >= 15, "the corpus has {} cases", names.len());
    let mut report = Vec::new();
    for name in &names {
        let fails = run_case(name, &|_| {});
        println!("{name}: {}", if fails.is_empty() { "ok" } else { "FAILED" });
        for f in fails {
            report.push(format!("[{name}] {f}"));
        }
    }
    assert!(report.is_empty(), "\n{}", report.join("\n\n"));
}

/// kind's config behind a relative symlink, as config management leaves it
/// inside containerd's own directory: the agent edits the target, and revert
/// gives back the link itself (lstat/readlink compared by `run_case`).
#[test]
fn symlinked_config_toml() {
    let fails = run_case("kind", &|root| {
        let c = root.join("etc/containerd");
        fs::create_dir_all(c.join("managed")).unwrap();
        fs::rename(c.join("config.toml"), c.join("managed/config.toml")).unwrap();
        std::os::unix::fs::symlink("managed/config.toml", c.join("config.toml")).unwrap();
    });
    assert!(fails.is_empty(), "\n{}", fails.join("\n\n"));
}

/// EKS's operator base spec behind an absolute symlink, resolved inside --root
/// (never the machine's own /etc/containerd).
#[test]
fn symlinked_base_spec() {
    let fails = run_case("eks-al2023", &|root| {
        let c = root.join("etc/containerd");
        fs::create_dir_all(c.join("managed")).unwrap();
        fs::rename(
            c.join("base-runtime-spec.json"),
            c.join("managed/base-runtime-spec.json"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "/etc/containerd/managed/base-runtime-spec.json",
            c.join("base-runtime-spec.json"),
        )
        .unwrap();
    });
    assert!(fails.is_empty(), "\n{}", fails.join("\n\n"));
}

/// A link out of containerd's directory into a config management tree
/// (/etc/cm): followed when only root could have made it (issue 23: `run_case`
/// checks the edit at the target and revert giving back the link), and refused
/// naming both ends, with nothing in the tree changed, when the tree is
/// writable by a group (SECURITY.md: the link rule).
#[test]
fn symlinks_out_of_the_config_dirs_are_followed_only_when_trusted() {
    for (case, file, target) in [
        ("kind", "config.toml", "/etc/cm/containerd.toml"),
        (
            "eks-al2023",
            "base-runtime-spec.json",
            "/etc/cm/base-runtime-spec.json",
        ),
    ] {
        let link_out = |root: &Path| {
            fs::create_dir_all(root.join("etc/cm")).unwrap();
            let link = root.join("etc/containerd").join(file);
            fs::rename(&link, root.join(&target[1..])).unwrap();
            // Relative, as the test's own `containerd config dump` reads the
            // tree through the kernel (absolute links: `symlinked_base_spec`).
            let relative = format!("../cm/{}", Path::new(target).file_name().unwrap().display());
            std::os::unix::fs::symlink(relative, &link).unwrap();
        };
        let fails = run_case(case, &link_out);
        assert!(fails.is_empty(), "{case}:\n{}", fails.join("\n\n"));

        let t = tempfile::tempdir().unwrap();
        let root = t.path();
        copy_tree(&corpus().join(case).join("root"), root);
        link_out(root);
        let cm = root.join("etc/cm");
        fs::set_permissions(&cm, fs::Permissions::from_mode(0o775)).unwrap();
        let link = root.join("etc/containerd").join(file);
        write(
            root,
            "/etc/rdma-node-agent/config.toml",
            "[systemd]\nenabled = false\n[containerd]\ndaemon_version = 2\n",
        );
        let before = lstat_tree(root);
        for cmd in ["plan", "apply"] {
            let o = agent(
                root,
                &[cmd, "--no-restart"][..if cmd == "plan" { 1 } else { 2 }],
            );
            let text = format!("{}{}", stdout(&o), stderr(&o));
            assert_ne!(o.status.code(), Some(0), "{case} {cmd}: {text}");
            assert!(
                text.contains(
                    &format!("{} : it is a symbolic link to {target}", link.display())
                        .replace(" :", ":")
                ),
                "{case} {cmd}: {text}"
            );
            assert!(
                text.contains("its content was not read"),
                "{case} {cmd}: {text}"
            );
            assert!(
                text.contains(&format!("{} (a directory", cm.display()))
                    && text.contains("writable by its group"),
                "{case} {cmd}: {text}"
            );
        }
        assert_eq!(lstat_tree(root), before, "{case}: the tree changed");
    }
}
