//! Where containerd's config lives and who runs containerd: a distribution's
//! containerd.service, k3s/rke2 (a child of their own unit, config regenerated
//! from config.toml.tmpl) or microk8s (a snap service, config regenerated from
//! containerd-template.toml). Loads the main file and its imports in containerd's order.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use super::effective::Effective;
use super::toml::{ConfigFile, Version};
use super::{ConfigSet, ContainerdError};
use crate::config::ContainerdConfig;
use crate::host::HostError;
use crate::host::read::ReadHost;
use crate::host::runtime::Distro;

/// containerd ≥ 2.2 imports these by default when config.toml names no imports.
const DEFAULT_V3_IMPORTS: &str = "/etc/containerd/conf.d/*.toml";
const MICROK8S_DIR: &str = "/var/snap/microk8s/current/args";

/// Who runs containerd, which decides what is edited and what is restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Layout {
    /// containerd.service (or the configured unit) reads the config its unit passes.
    Plain,
    /// k3s or rke2 run containerd as a child and regenerate its config at start.
    Rancher { distro: &'static str },
    /// microk8s regenerates args/containerd.toml from containerd-template.toml.
    Microk8s,
    /// k0s rewrites its managed containerd.toml at start and merges
    /// containerd.d/*.toml (`super::k0s`).
    K0s,
}

impl Layout {
    pub fn of(distro: Distro) -> Layout {
        match distro {
            Distro::Plain => Layout::Plain,
            Distro::Rancher(distro) => Layout::Rancher { distro },
            Distro::Microk8s => Layout::Microk8s,
            Distro::K0s => Layout::K0s,
        }
    }
}

/// What k3s, rke2 and microk8s bundle (neither is on PATH): the containerd they
/// run and its `ctr`. k3s: `data/<hash>/bin` holds them as links to its
/// multi-call binary, `data/current` links to the running one (k3s-io/k3s
/// `scripts/package-cli`); rke2 installs them under `/var/lib/rancher/rke2/bin`
/// (its docs: "RKE2 ships with ctr and crictl"); microk8s runs
/// `${SNAP}/bin/containerd` and its `microk8s ctr` wrapper runs `${SNAP}/bin/ctr`
/// (canonical/microk8s `microk8s-resources/wrappers/microk8s-ctr.wrapper`).
const BUNDLED: &[(&str, &str, &str)] = &[
    (
        "k3s",
        "/var/lib/rancher/k3s/data/current/bin/containerd",
        "/var/lib/rancher/k3s/data/current/bin/ctr",
    ),
    (
        "rke2",
        "/var/lib/rancher/rke2/bin/containerd",
        "/var/lib/rancher/rke2/bin/ctr",
    ),
    (
        "microk8s",
        "/snap/microk8s/current/bin/containerd",
        "/snap/microk8s/current/bin/ctr",
    ),
];

/// The agent's default `base_spec_path` (under /etc/containerd).
pub const DEFAULT_SPEC_PATH: &str = "/etc/containerd/rdma-node-agent/base-spec.json";

impl Layout {
    fn who(&self) -> &'static str {
        match self {
            Layout::Plain => "",
            Layout::Rancher { distro } => distro,
            Layout::Microk8s => "microk8s",
            Layout::K0s => "k0s",
        }
    }

    fn bundle(&self) -> Option<&'static (&'static str, &'static str, &'static str)> {
        BUNDLED.iter().find(|(d, _, _)| *d == self.who())
    }

    /// The containerd binary this layout runs, when it bundles its own.
    pub fn bundled_containerd(&self) -> Option<&'static str> {
        // k0s stages containerd, its shim and runc, but no ctr (`k0s ctr` is a subcommand).
        let k0s = (self == &Layout::K0s).then_some(crate::host::runtime::K0S_BINARY);
        self.bundle().map(|b| b.1).or(k0s)
    }

    /// The `ctr` this layout bundles beside its containerd.
    pub fn bundled_ctr(&self) -> Option<&'static str> {
        self.bundle().map(|b| b.2)
    }

    /// Where the base spec goes when `base_spec_path` is left at its default:
    /// inside the tree the layout already keeps its containerd config in, so
    /// the agent writes in one place per layout, and never names a file in an
    /// `/etc/containerd` that k3s, rke2 and microk8s nodes often lack (and
    /// that the unit then cannot create).
    pub fn spec_path(&self, configured: &Path, main_config: &Path) -> PathBuf {
        if self == &Layout::Plain || configured != Path::new(DEFAULT_SPEC_PATH) {
            return configured.to_owned();
        }
        if self == &Layout::K0s {
            // Beside the agent's drop-in, in the one directory the shipped unit
            // grants on k0s nodes; k0s reloads containerd on any change there.
            return super::k0s::SPEC.into();
        }
        main_config
            .parent()
            .unwrap_or(Path::new("/"))
            .join("rdma-node-agent/base-spec.json")
    }
}

/// The containerd binary that judges configs: the configured one, unless it is
/// the default (`containerd` on PATH) and the layout bundles its own, present.
pub(super) fn binary(host: &ReadHost, cfg: &ContainerdConfig, layout: &Layout) -> PathBuf {
    match layout.bundled_containerd() {
        Some(b) if cfg.binary == Path::new("containerd") && host.exists(Path::new(b)) => b.into(),
        _ => cfg.binary.clone(),
    }
}

/// The installed containerd's major version: `--version` of the containerd that
/// runs here on the live host (a distribution's bundled one first), else the
/// Debian package's version recorded under the root.
pub(super) fn daemon_major(
    host: &ReadHost,
    cfg: &ContainerdConfig,
    layout: &Layout,
) -> Option<u32> {
    if let Some(v) = cfg.daemon_version {
        return Some(v);
    }
    let binary = cfg.binary.to_string_lossy().into_owned();
    let candidates = layout
        .bundled_containerd()
        .map(str::to_owned)
        .into_iter()
        .chain(std::iter::once(binary));
    for bin in candidates {
        if let Some(Ok(out)) = host.query(&bin, &["--version"]) {
            if out.status.success() {
                // "containerd github.com/containerd/containerd 1.6.20~ds1 <commit>"
                let text = String::from_utf8_lossy(&out.stdout);
                if let Some(m) = text.split_whitespace().nth(2).and_then(major_of) {
                    return Some(m);
                }
            }
        }
    }
    crate::host::runtime::dpkg_containerd(host).and_then(|(_, version)| major_of(&version))
}

/// "1.6.20~ds1-1", "v1.7.23-k3s1", "2.0.0" → the major version.
fn major_of(v: &str) -> Option<u32> {
    let v = v.trim_start_matches('v');
    let v = v.split_once(':').map_or(v, |(_, rest)| rest); // a Debian epoch
    v.split('.').next()?.parse().ok()
}

fn read_file(host: &ReadHost, path: &Path) -> Result<ConfigFile, ContainerdError> {
    // It names the files the agent edits and the spec paths it writes.
    let data = host.read_trusted(path, "a containerd config file")?;
    let (text, mode, modified) = match data {
        None => (None, 0o644, None),
        Some(d) => (
            Some(String::from_utf8(d.bytes).map_err(|_| HostError::NotUtf8 {
                path: host.path(path),
            })?),
            d.mode,
            d.modified,
        ),
    };
    let mut file = ConfigFile::parse(path, &host.path(path), text, mode)?;
    file.modified = modified;
    Ok(file)
}

pub fn version_of(file: &ConfigFile, shown: &Path) -> Result<Version, ContainerdError> {
    match file.get(&["version"]) {
        None => Ok(Version::V1),
        Some(item) => match item.as_integer() {
            Some(1) => Ok(Version::V1),
            Some(2) => Ok(Version::V2),
            Some(3) => Ok(Version::V3),
            Some(4) => Ok(Version::V4),
            _ => Err(ContainerdError::Version {
                path: shown.to_owned(),
                found: item.to_string().trim().to_owned(),
            }),
        },
    }
}

/// The main file and, breadth-first as containerd loads them, its imports.
pub fn load_set(host: &ReadHost, main_path: &Path) -> Result<ConfigSet, ContainerdError> {
    let mut main = read_file(host, main_path)?;
    if main.original.is_none() {
        // A new file must say its version: without one containerd reads version 1.
        // Version 2 is read by containerd 1.3 to 2.x (2.x migrates it on load).
        main.doc.insert("version", toml_edit::value(2));
    }
    let version = version_of(&main, &host.path(main_path))?;
    let mut files = vec![main];
    if version == Version::V1 {
        return Ok(ConfigSet { version, files });
    }
    let mut seen: BTreeSet<PathBuf> = BTreeSet::from([main_path.to_owned()]);
    let mut next = 0;
    while next < files.len() {
        let patterns = import_patterns(&files[next], version, next == 0);
        let base = files[next]
            .path
            .parent()
            .unwrap_or(Path::new("/"))
            .to_owned();
        let from = files[next].path.clone();
        for pattern in patterns {
            let abs = base.join(&pattern);
            let abs = abs.to_string_lossy();
            let matches = if is_glob(&abs) {
                host.glob(&abs).map_err(|e| ContainerdError::Import {
                    path: host.path(&from),
                    pattern: pattern.clone(),
                    message: e.to_string(),
                })?
            } else {
                // containerd fails to start on a missing plain import: so do we.
                let p = PathBuf::from(abs.as_ref());
                if !host.exists(&p) {
                    return Err(ContainerdError::Import {
                        path: host.path(&from),
                        pattern,
                        message: format!("{} does not exist", host.path(&p).display()),
                    });
                }
                vec![p]
            };
            for p in matches {
                if seen.insert(p.clone()) {
                    files.push(read_file(host, &p)?);
                }
            }
        }
        next += 1;
    }
    Ok(ConfigSet { version, files })
}

fn import_patterns(file: &ConfigFile, version: Version, is_main: bool) -> Vec<String> {
    match file.get(&["imports"]).and_then(|i| i.as_array()) {
        Some(a) => a
            .iter()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect(),
        None if is_main && version >= Version::V3 => vec![DEFAULT_V3_IMPORTS.to_owned()],
        None => Vec::new(),
    }
}

fn is_glob(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

/// The plain-TOML template k3s/rke2 regenerate config.toml from. A Go template
/// the agent cannot edit: once an admin has added the spec to every handler in
/// it by hand (so config.toml has it too), the agent only maintains the spec file.
pub(super) fn load_rancher_template(
    host: &ReadHost,
    set: &ConfigSet,
    spec_path: &Path,
) -> Result<Option<ConfigSet>, ContainerdError> {
    let main_path = &set.files[0].path;
    let dir = main_path.parent().unwrap_or(Path::new("/"));
    let candidates = ["config-v3.toml.tmpl", "config.toml.tmpl"];
    let Some(tmpl) = candidates
        .iter()
        .map(|n| dir.join(n))
        .find(|p| host.exists(p))
    else {
        return Err(ContainerdError::Rancher(format!(
            "{} is generated by k3s/rke2 at every start, so edits to it would be lost. Create {} (a copy of config.toml is a good start), then run apply again: the agent edits both",
            host.path(main_path).display(),
            host.path(&dir.join(super::rancher::template_name(set)))
                .display()
        )));
    };
    let text = host
        .read_trusted(&tmpl, "the k3s/rke2 containerd template")?
        .map(|d| String::from_utf8_lossy(&d.bytes).into_owned())
        .unwrap_or_default();
    if text.contains("{{") {
        let done = super::Merge::ALL.iter().all(|m| {
            Effective::of(set, *m)
                .handlers
                .iter()
                .all(|h| !h.linux() || h.spec.is_some())
        });
        if done {
            return Ok(None);
        }
        if let Some(advice) = super::rancher::go_template_advice(
            &text,
            set.version,
            &host.path(&tmpl),
            &host.path(main_path),
        ) {
            return Err(ContainerdError::Rancher(advice));
        }
        let mut key = set.version.runtimes_path();
        key.push("<handler>");
        return Err(ContainerdError::Rancher(format!(
            "{} is a Go template, which the agent cannot edit safely. Add by hand, in it, the line `base_runtime_spec = \"{}\"` to the table [{}] of every runtime handler (runc, and each other one under [{}]); restart k3s/rke2 so config.toml has it too, then run apply again: the agent writes that spec file",
            host.path(&tmpl).display(),
            spec_path.display(),
            dotted(&key),
            dotted(&set.version.runtimes_path()),
        )));
    }
    let file = read_file(host, &tmpl)?;
    let version = version_of(&file, &host.path(&tmpl))?;
    Ok(Some(ConfigSet {
        version,
        files: vec![file],
    }))
}

/// microk8s's template: plain TOML whose `${SNAP_DATA}`-style placeholders are
/// filled in by sed at each start of its containerd service.
pub(super) fn load_microk8s_template(host: &ReadHost) -> Result<ConfigSet, ContainerdError> {
    let tmpl = Path::new(MICROK8S_DIR).join("containerd-template.toml");
    if !host.exists(&tmpl) {
        return Err(ContainerdError::Rancher(format!(
            "{} is regenerated by microk8s from {} at every start, which is missing: reinstall or refresh the microk8s snap",
            host.path(&Path::new(MICROK8S_DIR).join("containerd.toml"))
                .display(),
            host.path(&tmpl).display()
        )));
    }
    let file = read_file(host, &tmpl)?;
    let version = version_of(&file, &host.path(&tmpl))?;
    Ok(ConfigSet {
        version,
        files: vec![file],
    })
}

/// A key path as TOML spells it: `plugins."io.containerd.grpc.v1.cri".containerd`.
pub fn dotted(path: &[&str]) -> String {
    path.iter()
        .map(|k| {
            // `<handler>` is a placeholder for the reader, not a key.
            if k.starts_with('<')
                || k.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
            {
                (*k).to_owned()
            } else {
                format!("{k:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn majors_of_package_and_binary_versions() {
        assert_eq!(major_of("1.6.20~ds1-1+deb12u3"), Some(1));
        assert_eq!(major_of("v1.7.23-k3s2"), Some(1));
        assert_eq!(major_of("2.0.0"), Some(2));
        assert_eq!(major_of("1:2.1.3-1"), Some(2));
        assert_eq!(major_of("abc"), None);
    }

    #[test]
    fn layouts_keep_the_spec_in_their_own_tree_unless_told() {
        let d = Path::new(DEFAULT_SPEC_PATH);
        let k3s = Path::new("/var/lib/rancher/k3s/agent/etc/containerd/config.toml");
        let rancher = Layout::Rancher { distro: "k3s" };
        assert_eq!(
            rancher.spec_path(d, k3s),
            Path::new("/var/lib/rancher/k3s/agent/etc/containerd/rdma-node-agent/base-spec.json")
        );
        let mk = Path::new("/var/snap/microk8s/current/args/containerd.toml");
        assert_eq!(
            Layout::Microk8s.spec_path(d, mk),
            Path::new("/var/snap/microk8s/current/args/rdma-node-agent/base-spec.json")
        );
        assert_eq!(
            Layout::Plain.spec_path(d, Path::new("/opt/c/config.toml")),
            d
        );
        let mine = Path::new("/srv/spec.json");
        assert_eq!(rancher.spec_path(mine, k3s), mine);
        assert_eq!(
            Layout::Microk8s.bundled_ctr(),
            Some("/snap/microk8s/current/bin/ctr")
        );
        assert_eq!(Layout::Plain.bundled_containerd(), None);
    }

    #[test]
    fn dotted_keys_are_quoted_when_toml_needs_it() {
        assert_eq!(
            dotted(&["plugins", "io.containerd.grpc.v1.cri", "containerd"]),
            "plugins.\"io.containerd.grpc.v1.cri\".containerd"
        );
    }
}
