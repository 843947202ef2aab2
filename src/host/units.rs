//! systemd unit files as systemd reads them, under the root: the unit file by
//! its search path, its drop-ins, and the command its `ExecStart=` really runs
//! (with `Environment=` and `EnvironmentFile=` expanded). Without a bus (a
//! `--root` tree, a host whose PID 1 is not systemd) this is the only way to
//! know what a restart of the unit would start; on the live host it is what
//! the next restart reads, even before `daemon-reload`.
//!
//! Only what the agent needs of systemd.service(5), systemd.exec(5) and
//! systemd.syntax(7): `[Service]`, line continuations, quoting, resets by an
//! empty assignment, `${VAR}` (one word) and `$VAR` (split on spaces).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{Host, Result};

/// systemd's system unit search path, highest priority first (systemd.unit(5)).
pub const UNIT_DIRS: &[&str] = &[
    "/etc/systemd/system",
    "/run/systemd/system",
    "/usr/local/lib/systemd/system",
    "/usr/lib/systemd/system",
    "/lib/systemd/system",
];

/// A unit's `[Service]` settings the agent reads, after its drop-ins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnitFile {
    pub name: String,
    /// The unit file, then its drop-ins in the order systemd applies them.
    pub sources: Vec<PathBuf>,
    /// The last `ExecStart=`'s words before expansion (`None`: no ExecStart).
    pub exec_start: Option<Vec<String>>,
    pub environment: BTreeMap<String, String>,
    /// Environment files that could not be read (a `-` prefix makes a missing one fine).
    pub unreadable: Vec<String>,
    /// Every `ReadWritePaths=` value, prefixes kept (an empty assignment resets).
    pub read_write_paths: Vec<String>,
}

impl UnitFile {
    /// ExecStart's words with the unit's environment expanded, as systemd runs it.
    pub fn command(&self) -> Option<Vec<String>> {
        let words = self.exec_start.as_ref()?;
        let mut out = Vec::new();
        for w in words {
            if let Some(name) = w.strip_prefix('$').filter(|n| is_name(n)) {
                // `$VAR` alone: the value split into words.
                if let Some(v) = self.environment.get(name) {
                    out.extend(v.split_whitespace().map(str::to_owned));
                }
                continue;
            }
            out.push(expand_braced(w, &self.environment));
        }
        Some(out)
    }
}

fn is_name(s: &str) -> bool {
    !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `${VAR}` anywhere in a word; an unset one expands to nothing, as in systemd.
fn expand_braced(word: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
    let mut rest = word;
    while let Some(i) = rest.find("${") {
        out.push_str(&rest[..i]);
        match rest[i + 2..].find('}') {
            Some(j) => {
                let name = &rest[i + 2..i + 2 + j];
                out.push_str(env.get(name).map_or("", String::as_str));
                rest = &rest[i + 3 + j..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Splits a value into words as systemd.syntax(7) quotes them.
pub fn words(value: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    let mut chars = value.chars();
    while let Some(c) = chars.next() {
        match (quote, c) {
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (_, '\\') => {
                if let Some(n) = chars.next() {
                    cur.push(n);
                }
                in_word = true;
            }
            (_, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        out.push(cur);
    }
    out
}

/// `[Service]` assignments of one file, continuation lines joined.
fn service_assignments(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut section = String::new();
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.starts_with('#') || line.starts_with(';')) {
            continue;
        }
        if let Some(cont) = line.strip_suffix('\\') {
            pending.push_str(cont);
            pending.push(' ');
            continue;
        }
        let full = std::mem::take(&mut pending) + line;
        let full = full.trim();
        if full.starts_with('[') && full.ends_with(']') {
            section = full[1..full.len() - 1].to_owned();
            continue;
        }
        if section != "Service" {
            continue;
        }
        if let Some((k, v)) = full.split_once('=') {
            out.push((k.trim().to_owned(), v.trim().to_owned()));
        }
    }
    out
}

/// `KEY=VALUE` lines of an environment file (systemd.exec(5)).
fn env_file_assignments(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .filter_map(|l| {
            let l = l.strip_prefix("export ").unwrap_or(l);
            let (k, v) = l.split_once('=')?;
            let v = v.trim();
            let v = words(v).join(" ");
            Some((k.trim().to_owned(), v))
        })
        .collect()
}

impl Host {
    /// The unit file systemd would load for `name`, with its drop-ins applied;
    /// `None` when no unit directory has it.
    pub fn unit_file(&self, name: &str) -> Result<Option<UnitFile>> {
        let Some(main) = UNIT_DIRS
            .iter()
            .map(|d| Path::new(d).join(name))
            .find(|p| self.exists(p))
        else {
            return Ok(None);
        };
        // Drop-ins by file name: a higher-priority directory's file of the same
        // name hides the others; all apply in name order.
        let mut dropins: BTreeMap<String, PathBuf> = BTreeMap::new();
        for d in UNIT_DIRS.iter().rev() {
            let dir = Path::new(d).join(format!("{name}.d"));
            for f in self.list_dir(&dir)? {
                if f.ends_with(".conf") {
                    dropins.insert(f.clone(), dir.join(&f));
                }
            }
        }
        let mut unit = UnitFile {
            name: name.to_owned(),
            sources: vec![main.clone()],
            exec_start: None,
            environment: BTreeMap::new(),
            unreadable: Vec::new(),
            read_write_paths: Vec::new(),
        };
        unit.sources.extend(dropins.into_values());
        let mut env_files: Vec<String> = Vec::new();
        let mut envs: Vec<String> = Vec::new();
        for src in unit.sources.clone() {
            let text = self.read_string(&src)?.unwrap_or_default();
            for (k, v) in service_assignments(&text) {
                match (k.as_str(), v.is_empty()) {
                    ("ExecStart", true) => unit.exec_start = None,
                    ("ExecStart", false) => {
                        let mut w = words(&v);
                        if let Some(first) = w.first_mut() {
                            *first = first
                                .trim_start_matches(['@', '-', ':', '+', '!'])
                                .to_owned();
                        }
                        unit.exec_start = Some(w);
                    }
                    ("Environment", true) => envs.clear(),
                    ("Environment", false) => envs.push(v),
                    ("EnvironmentFile", true) => env_files.clear(),
                    ("EnvironmentFile", false) => env_files.push(v),
                    ("ReadWritePaths", true) => unit.read_write_paths.clear(),
                    ("ReadWritePaths", false) => unit.read_write_paths.extend(words(&v)),
                    _ => {}
                }
            }
        }
        for e in &envs {
            for w in words(e) {
                if let Some((k, v)) = w.split_once('=') {
                    unit.environment.insert(k.to_owned(), v.to_owned());
                }
            }
        }
        // EnvironmentFile= is read after Environment= and wins (systemd.exec(5)).
        for f in env_files {
            let (optional, path) = match f.strip_prefix('-') {
                Some(p) => (true, p.to_owned()),
                None => (false, f.clone()),
            };
            match self.read_string(Path::new(&path)) {
                Ok(Some(text)) => unit.environment.extend(env_file_assignments(&text)),
                Ok(None) if optional => {}
                Ok(None) => unit.unreadable.push(format!("{path} (missing)")),
                Err(e) => unit.unreadable.push(e.to_string()),
            }
        }
        Ok(Some(unit))
    }
}

/// The value of `--config`/`-c` in containerd's arguments (urfave/cli spellings).
pub fn config_arg(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        for flag in ["--config", "-config", "-c", "--c"] {
            if a == flag {
                return it.next().cloned();
            }
            if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v.to_owned());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_follow_systemd_quoting() {
        assert_eq!(
            words(r#"/usr/bin/containerd --config "/etc/a b.toml" 'x y' z\ w"#),
            [
                "/usr/bin/containerd",
                "--config",
                "/etc/a b.toml",
                "x y",
                "z w"
            ]
        );
        assert_eq!(words(r#"A=1 "B=two words""#), ["A=1", "B=two words"]);
    }

    #[test]
    fn config_argument_spellings() {
        let a = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            config_arg(&a("containerd --config /x")).as_deref(),
            Some("/x")
        );
        assert_eq!(
            config_arg(&a("containerd --config=/x")).as_deref(),
            Some("/x")
        );
        assert_eq!(
            config_arg(&a("containerd -c /y --log-level debug")).as_deref(),
            Some("/y")
        );
        assert_eq!(config_arg(&a("containerd --log-level debug")), None);
        assert_eq!(config_arg(&a("containerd --cri-x")), None);
    }

    #[test]
    fn braced_and_bare_variables_expand_as_systemd_does() {
        let unit = UnitFile {
            name: "containerd.service".into(),
            sources: vec![],
            exec_start: Some(words(
                "/usr/bin/containerd --config ${CONTAINERD_CONFIG} $OPTS",
            )),
            environment: [
                (
                    "CONTAINERD_CONFIG".to_owned(),
                    "/usr/share/containerd/config.toml".to_owned(),
                ),
                ("OPTS".to_owned(), "--log-level  info".to_owned()),
            ]
            .into(),
            unreadable: vec![],
            read_write_paths: vec![],
        };
        assert_eq!(
            unit.command().unwrap(),
            [
                "/usr/bin/containerd",
                "--config",
                "/usr/share/containerd/config.toml",
                "--log-level",
                "info"
            ]
        );
    }

    #[test]
    fn continuation_lines_sections_and_comments() {
        let text = "[Unit]\nExecStart=/not/this\n[Service]\n# ExecStart=/commented\nExecStart=/usr/bin/containerd \\\n  --config /a.toml\n";
        assert_eq!(
            service_assignments(text),
            [(
                "ExecStart".to_owned(),
                "/usr/bin/containerd  --config /a.toml".to_owned()
            )]
        );
    }
}
