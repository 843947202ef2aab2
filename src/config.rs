//! The agent's own configuration, `/etc/rdma-node-agent/config.toml` under the root.
//! Parsed strictly: an unknown key is an error naming the key, line and column.
//! Every key and default is documented in `etc/rdma-node-agent/config.toml`.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::host::{Host, HostError};

mod containerd;
pub mod counters;
pub mod driver_health;
pub mod globs;
pub mod gpudirect;
pub mod nri;
pub mod pcie;
pub mod peers;
pub mod rdma;
pub mod readiness;
pub mod section;
mod sections;

pub use containerd::{ContainerdConfig, RlimitName};
pub use sections::{
    DEFAULT_LISTEN, DaemonConfig, HttpConfig, KernelConfig, NfdConfig, SystemdConfig,
};

use section::{AnySection, Section};

pub const DEFAULT_PATH: &str = "/etc/rdma-node-agent/config.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(transparent)]
    Host(#[from] HostError),
    #[error("{path}:{line}:{column}: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
    },
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    pub mode: Mode,
    pub containerd: ContainerdConfig,
    pub systemd: SystemdConfig,
    pub pods: PodsConfig,
    pub daemon: DaemonConfig,
    pub http: HttpConfig,
    pub nfd: NfdConfig,
    pub rdma: rdma::RdmaConfig,
    pub counters: counters::CountersConfig,
    pub gpudirect: gpudirect::GpuDirectConfig,
    pub pcie: pcie::PcieConfig,
    pub kernel: KernelConfig,
    pub kubelet: readiness::KubeletConfig,
    pub driver_health: driver_health::DriverHealthConfig,
    pub peers: peers::PeersConfig,
    /// What the file says that is no longer read, and what to write instead.
    #[serde(skip)]
    pub warnings: Vec<String>,
    /// SHA-256 of the file's bytes (None: no file, the built-in defaults), shown
    /// in `/status` so a rollout can wait for a reconcile with the config it wrote.
    #[serde(skip)]
    pub sha256: Option<String>,
}

/// What `serve` does with what it finds: converge, or only report (never writes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    #[default]
    Enforce,
    Report,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PodsConfig {
    /// How a running pod container whose locked-memory limit is below target is reported.
    pub below_target: Severity,
    /// How `pods.rdma` reports a container with RDMA devices that lacks
    /// CAP_IPC_LOCK or whose locked-memory limit is below target.
    pub rdma: Severity,
}

impl Default for PodsConfig {
    fn default() -> Self {
        PodsConfig {
            below_target: Severity::Warn,
            rdma: Severity::Warn,
        }
    }
}

impl Section for PodsConfig {
    const NAME: &'static str = "pods";

    // Both keys are enums: serde refuses any other value.
    fn validate(&self) -> Result<(), (&'static str, String)> {
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Warn,
    Fail,
}

impl Config {
    /// Reads the config under the root; a missing file means the built-in defaults.
    pub fn load(host: &Host, path: &Path) -> Result<Config, ConfigError> {
        // It decides what a root daemon writes: refused unless only root can change it.
        match host.read_trusted(path, "the agent config")? {
            None => Ok(Config::default()),
            Some(d) => {
                let text = String::from_utf8(d.bytes).map_err(|_| HostError::NotUtf8 {
                    path: host.path(path),
                })?;
                let mut cfg = Config::parse(&text, &host.path(path))?;
                use sha2::Digest;
                let digest = sha2::Sha256::digest(text.as_bytes());
                cfg.sha256 = Some(digest.iter().map(|b| format!("{b:02x}")).collect());
                for w in &cfg.warnings {
                    tracing::warn!("{w}");
                }
                Ok(cfg)
            }
        }
    }

    pub fn parse(text: &str, shown_path: &Path) -> Result<Config, ConfigError> {
        let mut cfg: Config = toml::from_str(text).map_err(|e| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            ConfigError::Invalid {
                path: shown_path.to_owned(),
                line,
                column,
                message: e.message().to_owned(),
            }
        })?;
        cfg.migrate(shown_path);
        cfg.validate(text, shown_path)?;
        Ok(cfg)
    }

    /// Every `[section]` of the file, each once, in the file's order: the one
    /// list validation iterates (a test holds it to the tables the parser
    /// accepts, so a new section cannot go unvalidated).
    pub fn sections(&self) -> [&dyn AnySection; 14] {
        [
            &self.containerd,
            &self.systemd,
            &self.pods,
            &self.daemon,
            &self.http,
            &self.nfd,
            &self.rdma,
            &self.counters,
            &self.gpudirect,
            &self.pcie,
            &self.kernel,
            &self.kubelet,
            &self.driver_health,
            &self.peers,
        ]
    }

    /// Every section's own checks, in the file's order of sections.
    fn validate(&self, text: &str, shown_path: &Path) -> Result<(), ConfigError> {
        for s in self.sections() {
            s.check().map_err(|(key, why)| {
                let (line, column) = section::locate(text, s.name(), key);
                ConfigError::Invalid {
                    path: shown_path.to_owned(),
                    line,
                    column,
                    message: format!("{key} under [{}]: {why}", s.name()),
                }
            })?;
        }
        Ok(())
    }

    /// Keys that said a second time what another says (and could disagree):
    /// the old one is taken as the new one where that is unset, and either way
    /// the file gets a warning saying exactly what to write.
    fn migrate(&mut self, shown_path: &Path) {
        self.migrate_gpudirect(shown_path);
        self.migrate_units(shown_path);
    }

    /// `[rdma] gpudirect_required` said "GPUDirect is required" beside
    /// `[gpudirect] required`: the modules now live in `[gpudirect]` too.
    fn migrate_gpudirect(&mut self, shown_path: &Path) {
        let Some(old) = self.rdma.gpudirect_required.take() else {
            return;
        };
        let shown = shown_path.display();
        let list = |m: &[rdma::GpuDirectModule]| {
            let names: Vec<String> = m.iter().map(|m| format!("{:?}", m.name())).collect();
            format!("[{}]", names.join(", "))
        };
        let new = &self.gpudirect.required_modules;
        if new.is_empty() || *new == old {
            self.warnings.push(format!(
                "{shown}: `gpudirect_required` under [rdma] is no longer read; it is taken as `required_modules = {}` under [gpudirect], the one place that says GPUDirect is required: write that there instead, and delete the line under [rdma]",
                list(&old)
            ));
            self.gpudirect.required_modules = old;
        } else {
            self.warnings.push(format!(
                "{shown}: `gpudirect_required = {}` under [rdma] is no longer read: `required_modules = {}` under [gpudirect] says which GPUDirect modules must be loaded; delete the line under [rdma]",
                list(&old),
                list(new)
            ));
        }
    }

    /// `[systemd] units` named the unit that runs containerd a second time, and
    /// the two could disagree: one entry becomes `[containerd] unit` (when that
    /// is unset), and either way the file gets a warning saying what to write.
    fn migrate_units(&mut self, shown_path: &Path) {
        let Some(units) = self.systemd.units.take() else {
            return;
        };
        let shown = shown_path.display();
        match (units.as_slice(), &self.containerd.unit) {
            ([one], None) => {
                self.warnings.push(format!(
                    "{shown}: `units` under [systemd] is no longer read; it is taken as `unit = {one:?}` under [containerd], the one setting for the unit that runs containerd (its restart and its LimitMEMLOCK drop-in): write that instead"
                ));
                if one != "containerd.service" {
                    self.containerd.unit = Some(one.clone());
                }
            }
            _ => self.warnings.push(format!(
                "{shown}: `units` under [systemd] ({}) is no longer read: the LimitMEMLOCK drop-in goes to the unit that runs containerd, detected or set by `unit = \"…\"` under [containerd]; delete the line",
                units.join(", ")
            )),
        }
    }
}

/// 1-based line and column (in characters) of a byte offset.
pub fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = &text[..offset.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::host::limit::Limit;
    use std::collections::BTreeSet;

    #[test]
    fn limits_parse() {
        assert_eq!(Limit::parse("unlimited"), Ok(Limit::UNLIMITED));
        assert_eq!(Limit::parse("infinity"), Ok(Limit::UNLIMITED));
        assert_eq!(Limit::parse("4MiB"), Ok(Limit(4 << 20)));
        assert_eq!(Limit::parse("4M"), Ok(Limit(4 << 20)));
        assert_eq!(Limit::parse("65536"), Ok(Limit(65536)));
        assert!(Limit::parse("4MB").unwrap_err().contains("decimal"));
        assert!(Limit::parse("lots").is_err());
        assert!(Limit::parse("99999999999TiB").is_err());
        assert_eq!(Limit(4 << 20).to_string(), "4MiB");
        assert_eq!(Limit::UNLIMITED.to_string(), "unlimited");
        assert_eq!(Limit(1000).to_string(), "1000 bytes");
    }

    /// Every table the parser accepts (it names them when it refuses a key)
    /// is a section that `sections()` lists, so validation reaches it.
    #[test]
    fn every_section_the_parser_accepts_is_validated() {
        let e = Config::parse("probe_ = 0\n", Path::new("c.toml")).unwrap_err();
        let e = e.to_string();
        let expected = e.split_once("expected").expect("the fields it expects").1;
        let tables: BTreeSet<&str> = expected
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|k| *k != "mode") // the one top-level key that is not a table
            .collect();
        let listed: BTreeSet<&str> = Config::default().sections().map(|s| s.name()).into();
        assert_eq!(
            tables, listed,
            "a [section] that Config::sections() does not list"
        );
        assert_eq!(
            listed.len(),
            Config::default().sections().len(),
            "a section twice"
        );
    }

    #[test]
    fn defaults_when_empty() {
        let c = Config::parse("", Path::new("c.toml")).unwrap();
        assert_eq!(c, Config::default());
        assert!(c.containerd.memlock.is_unlimited());
    }

    #[test]
    fn full_config() {
        let c = Config::parse(
            r#"
[containerd]
memlock = "4MiB"
handlers = ["runc", "nvidia"]
[containerd.rlimits]
RLIMIT_NOFILE = 1048576
[pods]
below_target = "fail"
"#,
            Path::new("c.toml"),
        )
        .unwrap();
        assert_eq!(c.containerd.memlock, Limit(4 << 20));
        assert_eq!(c.containerd.handlers, vec!["runc", "nvidia"]);
        assert_eq!(c.pods.below_target, Severity::Fail);
        assert_eq!(c.containerd.rlimits.len(), 1);
    }

    #[test]
    fn unknown_key_names_key_line_and_column() {
        let e = Config::parse("[containerd]\nmemlok = \"4MiB\"\n", Path::new("/x/c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("/x/c.toml:2:1: "), "{e}");
        assert!(e.contains("memlok"), "{e}");
    }

    #[test]
    fn bad_values_are_located() {
        let e = Config::parse("[containerd]\nmemlock = \"4MB\"\n", Path::new("c.toml"))
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("c.toml:2:11: "), "{e}");
        assert!(e.contains("decimal"), "{e}");
        let e = Config::parse(
            "[containerd.rlimits]\nRLIMIT_MEMLOCK = 1\n",
            Path::new("c.toml"),
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("containerd.memlock"), "{e}");
    }

    #[test]
    fn each_section_refuses_values_it_cannot_use() {
        let err = |text: &str| {
            Config::parse(text, Path::new("c.toml"))
                .unwrap_err()
                .to_string()
        };
        let cases = [
            (
                "[daemon]\ninterval_secs = 0\n",
                "c.toml:2:1: interval_secs under [daemon]",
            ),
            (
                "[rdma]\n  modprobe_file = \"/etc/modprobe.d/rdma\"\n",
                "c.toml:2:3: modprobe_file under [rdma]: /etc/modprobe.d/rdma must end in .conf",
            ),
            (
                "[systemd]\ndropin = \"50-x\"\n",
                "c.toml:2:1: dropin under [systemd]",
            ),
            (
                "[http]\nlisten = \"localhost\"\n",
                "c.toml:2:1: listen under [http]",
            ),
            (
                "[nfd]\npath = \"features.d/x\"\n",
                "c.toml:2:1: path under [nfd]",
            ),
            (
                "[containerd]\nunit = \"containerd\"\n",
                "c.toml:2:1: unit under [containerd]",
            ),
            (
                "[kernel]\nrequired_modules = [\"ib core\"]\n",
                "c.toml:2:1: required_modules under [kernel]",
            ),
            (
                "[gpudirect]\nrequired_gpus = [\"0000:1B:00.0\"]\n",
                "c.toml:2:1: required_gpus under [gpudirect]",
            ),
            (
                "[kubelet]\ndevice_plugins_dir = \"plugins\"\n",
                "c.toml:2:1: device_plugins_dir under [kubelet]",
            ),
        ];
        for (text, want) in cases {
            let e = err(text);
            assert!(e.starts_with(want), "{text:?}: {e}");
        }
        // The shipped defaults pass every section's checks.
        Config::parse("", Path::new("c.toml")).unwrap();
        let ok = "[gpudirect]\nrequired_gpus = [\"0000:1b:00.0\"]\n[http]\nlisten = \"unix:/run/x.sock\"\n";
        Config::parse(ok, Path::new("c.toml")).unwrap();
    }

    /// One place says GPUDirect is required: the old `[rdma]` key still loads,
    /// as the `[gpudirect]` one, with a warning that says what to write.
    #[test]
    fn the_old_gpudirect_key_loads_as_the_new_one_with_a_warning() {
        use rdma::GpuDirectModule::{Gdrdrv, NvidiaPeermem};
        let old = "[rdma]\ngpudirect_required = [\"nvidia_peermem\", \"gdrdrv\"]\n";
        let c = Config::parse(old, Path::new("/etc/rdma-node-agent/config.toml")).unwrap();
        assert_eq!(c.gpudirect.required_modules, [NvidiaPeermem, Gdrdrv]);
        assert_eq!(c.rdma.gpudirect_required, None);
        assert_eq!(
            c.warnings,
            [
                "/etc/rdma-node-agent/config.toml: `gpudirect_required` under [rdma] is no longer read; it is taken as `required_modules = [\"nvidia_peermem\", \"gdrdrv\"]` under [gpudirect], the one place that says GPUDirect is required: write that there instead, and delete the line under [rdma]"
            ]
        );
        // What the warning says to write means the same, with no warning.
        let new = "[gpudirect]\nrequired_modules = [\"nvidia_peermem\", \"gdrdrv\"]\n";
        let n = Config::parse(new, Path::new("c.toml")).unwrap();
        assert_eq!(n.gpudirect, c.gpudirect);
        assert!(n.warnings.is_empty());
        // Both, differing: the new key wins, the old line is to go.
        let both = format!("{old}[gpudirect]\nrequired_modules = [\"gdrdrv\"]\n");
        let b = Config::parse(&both, Path::new("c.toml")).unwrap();
        assert_eq!(b.gpudirect.required_modules, [Gdrdrv]);
        assert!(
            b.warnings[0]
                .contains("is no longer read: `required_modules = [\"gdrdrv\"]` under [gpudirect]"),
            "{:?}",
            b.warnings
        );
    }
}
