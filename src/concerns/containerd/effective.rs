//! The CRI runtime handlers as containerd will see them once every file is merged:
//! the truth `containerd.memlock` judges from, and where an edit of each belongs.
//!
//! Two things depend on which containerd reads the files, not on the files:
//! - imports: containerd 1.x replaces a plugin's whole table with an imported
//!   file's (so a drop-in with a CRI section hides the main file's runtimes);
//!   2.x merges them key by key;
//! - the legacy `default_runtime` / `untrusted_workload_runtime` tables: 1.x turns
//!   a non-empty one into the handler `default` (then the default for every pod
//!   without a RuntimeClass) or `untrusted`; 2.x no longer reads them.

use super::ConfigSet;
use super::toml::{ConfigFile, Version};

/// The runtime type of containerd's built-in `runc` handler.
pub const RUNC_TYPE: &str = "io.containerd.runc.v2";

/// How containerd merges imported files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Merge {
    /// containerd 1.x: the last file with a plugin's table wins that whole table.
    Replace,
    /// containerd 2.x: tables merge key by key, later files win a key.
    Deep,
}

impl Merge {
    pub const ALL: [Merge; 2] = [Merge::Replace, Merge::Deep];

    pub fn describe(self) -> &'static str {
        match self {
            Merge::Replace => "containerd 1.x",
            Merge::Deep => "containerd 2.x",
        }
    }
}

/// A CRI runtime handler as containerd will see it once every file is merged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handler {
    pub name: String,
    /// The key path of its runtime table.
    pub table: Vec<String>,
    /// The effective `base_runtime_spec` (non-empty).
    pub spec: Option<String>,
    /// Index of the file an edit of this handler belongs in.
    pub file: usize,
    /// The effective `runtime_type` (non-empty).
    pub runtime_type: Option<String>,
    /// containerd's built-in `runc`, in no file: an edit must create its table
    /// with its runtime type.
    pub implicit: bool,
}

impl Handler {
    /// It runs Linux containers (runhcs runs Windows ones: no rlimits there).
    pub fn linux(&self) -> bool {
        !self
            .runtime_type
            .as_deref()
            .is_some_and(|t| t.contains("runhcs"))
    }

    /// The key path of one of its settings.
    pub fn key<'a>(&'a self, leaf: &'a str) -> Vec<&'a str> {
        let mut p: Vec<&str> = self.table.iter().map(String::as_str).collect();
        p.push(leaf);
        p
    }
}

/// The handlers CRI can use and the one it uses for a pod with no RuntimeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Effective {
    pub handlers: Vec<Handler>,
    pub default: String,
}

/// The legacy tables of containerd 1.x's CRI config and the handler each becomes.
const LEGACY: [(&str, &str); 2] = [
    ("default_runtime", "default"),
    ("untrusted_workload_runtime", "untrusted"),
];

impl Effective {
    /// The effective handlers of a config set under one merge rule. Legacy tables
    /// count under `Replace` (containerd 1.x) only.
    pub fn of(set: &ConfigSet, merge: Merge) -> Effective {
        let v = set.version;
        let runtimes = v.runtimes_path();
        let mut handlers: Vec<Handler> = Vec::new();
        let mut default = "runc".to_owned();
        let files: Vec<(usize, &ConfigFile)> = match merge {
            Merge::Replace => {
                // The last file that has the plugin's table is the only one that counts.
                let idx = winner(set);
                vec![(idx, &set.files[idx])]
            }
            Merge::Deep => set.files.iter().enumerate().collect(),
        };
        for (idx, f) in files {
            for name in f.keys(&runtimes) {
                let mut table: Vec<String> = runtimes.iter().map(|s| s.to_string()).collect();
                table.push(name.clone());
                merge_into(&mut handlers, name, table, f, idx);
            }
            if let Some(d) = f.get_str(&v.default_runtime_path()) {
                default = d.to_owned();
            }
            if merge == Merge::Replace && v <= Version::V2 {
                let mut containerd = v.runtime_plugin().to_vec();
                containerd.push("containerd");
                for (key, name) in LEGACY {
                    let mut table: Vec<String> = containerd.iter().map(|s| s.to_string()).collect();
                    table.push(key.to_owned());
                    let t: Vec<&str> = table.iter().map(String::as_str).collect();
                    let mut ty = t.clone();
                    ty.push("runtime_type");
                    // CRI only takes the table when it names a runtime type.
                    if f.get_str(&ty).is_some_and(|s| !s.is_empty()) {
                        handlers.retain(|h| h.name != name);
                        merge_into(&mut handlers, name.to_owned(), table, f, idx);
                        if name == "default" {
                            default = name.to_owned();
                        }
                    }
                }
            }
        }
        // containerd's built-in runc handler stays usable (by a RuntimeClass) where no
        // file replaces it: 1.x decodes the winning file's `runtimes` table over the
        // defaults (dropping runc), 2.x merges into them (keeping it).
        let builtin = match merge {
            Merge::Replace => set.files[winner(set)].get(&runtimes).is_none(),
            Merge::Deep => true,
        };
        if builtin && !handlers.iter().any(|h| h.name == "runc") {
            let mut table: Vec<String> = runtimes.iter().map(|s| s.to_string()).collect();
            table.push("runc".to_owned());
            handlers.push(Handler {
                name: "runc".to_owned(),
                table,
                spec: None,
                file: match merge {
                    Merge::Replace => winner(set),
                    Merge::Deep => 0,
                },
                runtime_type: Some(RUNC_TYPE.to_owned()),
                implicit: true,
            });
        }
        handlers.sort_by(|a, b| a.name.cmp(&b.name));
        Effective { handlers, default }
    }

    pub fn get(&self, name: &str) -> Option<&Handler> {
        self.handlers.iter().find(|h| h.name == name)
    }
}

/// Index of the file whose CRI plugin table containerd 1.x keeps.
pub fn winner(set: &ConfigSet) -> usize {
    let plugin = set.version.runtime_plugin();
    set.files
        .iter()
        .rposition(|f| f.get(&plugin).is_some())
        .unwrap_or(0)
}

fn merge_into(
    handlers: &mut Vec<Handler>,
    name: String,
    table: Vec<String>,
    f: &ConfigFile,
    idx: usize,
) {
    let key = |leaf: &str| {
        let mut p: Vec<&str> = table.iter().map(String::as_str).collect();
        p.push(leaf);
        f.get_str(&p).filter(|s| !s.is_empty()).map(str::to_owned)
    };
    let spec = key("base_runtime_spec");
    let runtime_type = key("runtime_type");
    let pos = match handlers.iter().position(|h| h.name == name) {
        Some(p) => p,
        None => {
            handlers.push(Handler {
                name,
                table: table.clone(),
                spec: None,
                file: idx,
                runtime_type: None,
                implicit: false,
            });
            handlers.len() - 1
        }
    };
    let h = &mut handlers[pos];
    // Later files override a key; an edit goes where the value now comes from,
    // else into the last file that defines the handler.
    if spec.is_some() || h.spec.is_none() {
        h.file = idx;
        h.table = table;
    }
    if spec.is_some() {
        h.spec = spec;
    }
    if runtime_type.is_some() {
        h.runtime_type = runtime_type;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn set(texts: &[&str]) -> ConfigSet {
        let files: Vec<ConfigFile> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let p = format!("/etc/containerd/{i}.toml");
                ConfigFile::parse(Path::new(&p), Path::new(&p), Some((*t).to_owned()), 0o644)
                    .unwrap()
            })
            .collect();
        let version = super::super::version_of(&files[0], Path::new("/x")).unwrap();
        ConfigSet { version, files }
    }

    const MAIN: &str = "version = 2\nimports = [\"/etc/containerd/1.toml\"]\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\n\
        runtime_type = \"io.containerd.runc.v2\"\nbase_runtime_spec = \"/spec.json\"\n";
    const DROPIN: &str = "version = 2\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"nvidia\"\n\
        [plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.nvidia]\n\
        runtime_type = \"io.containerd.runc.v2\"\n";

    #[test]
    fn containerd_1_keeps_only_the_last_cri_table() {
        let e = Effective::of(&set(&[MAIN, DROPIN]), Merge::Replace);
        let names: Vec<&str> = e.handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(
            names,
            ["nvidia"],
            "the main file's runc is hidden, the built-in too"
        );
        assert_eq!(e.default, "nvidia");
        assert_eq!(e.handlers[0].file, 1);
    }

    #[test]
    fn containerd_2_merges_imported_tables() {
        let e = Effective::of(&set(&[MAIN, DROPIN]), Merge::Deep);
        let names: Vec<&str> = e.handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["nvidia", "runc"]);
        assert_eq!(e.get("runc").unwrap().spec.as_deref(), Some("/spec.json"));
        assert_eq!(e.default, "nvidia");
    }

    #[test]
    fn legacy_default_runtime_is_the_default_handler_under_1x() {
        let v1 = "[plugins.cri.containerd]\n  snapshotter = \"overlayfs\"\n\
            [plugins.cri.containerd.default_runtime]\n  runtime_type = \"io.containerd.runtime.v1.linux\"\n\
            [plugins.cri.containerd.untrusted_workload_runtime]\n  runtime_type = \"\"\n";
        let e = Effective::of(&set(&[v1]), Merge::Replace);
        assert_eq!(e.default, "default");
        let names: Vec<&str> = e.handlers.iter().map(|h| h.name.as_str()).collect();
        // No `runtimes` table: containerd's built-in runc stays too.
        assert_eq!(
            names,
            ["default", "runc"],
            "an empty untrusted table is no handler"
        );
        assert!(e.handlers[1].implicit);
        assert_eq!(
            e.handlers[0].key("base_runtime_spec"),
            [
                "plugins",
                "cri",
                "containerd",
                "default_runtime",
                "base_runtime_spec"
            ]
        );
        // containerd 2.x reads neither.
        let e = Effective::of(&set(&[v1]), Merge::Deep);
        let names: Vec<&str> = e.handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["runc"]);
        assert_eq!(e.default, "runc");
    }

    #[test]
    fn runhcs_is_not_linux() {
        let t = "version = 2\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runhcs-wcow-process]\n\
            runtime_type = \"io.containerd.runhcs.v1\"\n";
        let e = Effective::of(&set(&[t]), Merge::Replace);
        assert_eq!(e.handlers.len(), 1);
        assert!(!e.handlers[0].linux());
    }

    #[test]
    fn containerd_2_keeps_its_builtin_runc_beside_other_handlers() {
        // As `containerd config dump` of containerd 2.1 shows for this file.
        let t = "version = 3\n[plugins.\"io.containerd.cri.v1.runtime\".containerd.runtimes.nvidia]\n\
            runtime_type = \"io.containerd.runc.v2\"\n";
        let e = Effective::of(&set(&[t]), Merge::Deep);
        let names: Vec<&str> = e.handlers.iter().map(|h| h.name.as_str()).collect();
        assert_eq!(names, ["nvidia", "runc"]);
        let e = Effective::of(&set(&[t]), Merge::Replace);
        assert_eq!(e.handlers.len(), 1, "1.x drops it");
    }
}
