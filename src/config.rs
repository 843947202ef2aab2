//! The agent's own configuration, `/etc/rdma-node-agent/config.toml` under the root.
//! Parsed strictly: an unknown key is an error naming the key, line and column.
//! Every key and default is documented in `etc/rdma-node-agent/config.toml`.

use std::path::{Path, PathBuf};

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::{Deserialize, Serialize};

use crate::host::{Host, HostError};

mod containerd;
pub mod globs;
pub mod gpudirect;
pub mod nri;
pub mod rdma;
pub mod section;
mod sections;

pub use containerd::{ContainerdConfig, RlimitName};
pub use sections::{DEFAULT_LISTEN, DaemonConfig, HttpConfig, NfdConfig, SystemdConfig};

use section::{AnySection, Declared, Invalid, Section};

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

/// The agent's config: its own settings and the sections the daemon, host
/// and more than one concern read, as fields; every other section, each a
/// concern's own (registered in `concerns::registry::SECTIONS`), in
/// `sections`, read with `section::<S>()`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    pub mode: Mode,
    pub containerd: ContainerdConfig,
    pub systemd: SystemdConfig,
    pub pods: PodsConfig,
    pub daemon: DaemonConfig,
    pub http: HttpConfig,
    pub nfd: NfdConfig,
    pub rdma: rdma::RdmaConfig,
    pub gpudirect: gpudirect::GpuDirectConfig,
    /// The registered sections, as the file writes them (a section parsed
    /// without the registry, as by `Config::default()`, is its defaults).
    pub sections: Sections,
    /// What the file says that is no longer read, and what to write instead.
    pub warnings: Vec<String>,
    /// SHA-256 of the file's bytes (None: no file, the built-in defaults), shown
    /// in `/status` so a rollout can wait for a reconcile with the config it wrote.
    pub sha256: Option<String>,
}

/// The agent's own sections: the one list they are parsed, validated and
/// named from (so none can be read unvalidated), in the file's order.
macro_rules! agent_sections {
    ($($field:ident),* $(,)?) => {
        impl Config {
            /// Every top-level key the agent itself reads.
            const AGENT_KEYS: &'static [&'static str] = &["mode", $(stringify!($field)),*];

            fn agent_sections(&self) -> Vec<&dyn AnySection> {
                vec![$(&self.$field),*]
            }

            /// Reads `key`'s value into its field; false when it is not the agent's.
            fn read_agent_key<'de, A: MapAccess<'de>>(
                &mut self,
                key: &str,
                map: &mut A,
            ) -> Result<bool, A::Error> {
                match key {
                    "mode" => self.mode = map.next_value()?,
                    $(stringify!($field) => self.$field = map.next_value()?,)*
                    _ => return Ok(false),
                }
                Ok(true)
            }
        }
    };
}

agent_sections!(
    containerd, systemd, pods, daemon, http, nfd, rdma, gpudirect,
);

/// The registered sections a config holds, each once, whatever their type.
#[derive(Debug, Default)]
pub struct Sections(Vec<Box<dyn AnySection>>);

impl Sections {
    fn get(&self, id: std::any::TypeId) -> Option<&dyn AnySection> {
        self.0
            .iter()
            .map(|s| s.as_ref())
            .find(|s| s.as_any().type_id() == id)
    }
}

impl Clone for Sections {
    fn clone(&self) -> Self {
        Sections(self.0.iter().map(|s| s.clone_box()).collect())
    }
}

/// Equal when every section has the same values, one absent from a config
/// counting as its defaults (as it reads through `Config::section`).
impl PartialEq for Sections {
    fn eq(&self, other: &Self) -> bool {
        let one_way =
            |a: &Sections, b: &Sections| a.0.iter().all(|s| s.same(b.get(s.as_any().type_id())));
        one_way(self, other) && one_way(other, self)
    }
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
    fn validate(&self) -> Result<(), Invalid> {
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
    /// Reads the config under the root; a missing file means the built-in
    /// defaults. `sections`: the registered ones (`concerns::registry::SECTIONS`).
    pub fn load(
        host: &Host,
        path: &Path,
        sections: &[&dyn Declared],
    ) -> Result<Config, ConfigError> {
        // It decides what a root daemon writes: refused unless only root can change it.
        match host.read_trusted(path, "the agent config")? {
            // The built-in defaults, every registered section held (so none
            // is looked up in the defaults kept per type).
            None => Config::parse("", &host.path(path), sections),
            Some(d) => {
                let text = String::from_utf8(d.bytes).map_err(|_| HostError::NotUtf8 {
                    path: host.path(path),
                })?;
                let mut cfg = Config::parse(&text, &host.path(path), sections)?;
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

    /// Parses the file strictly: each `[table]` goes to the agent's section
    /// or the registered one of that name, any other is an error; then every
    /// section, the agent's and each registered one, checks its values.
    pub fn parse(
        text: &str,
        shown_path: &Path,
        sections: &[&dyn Declared],
    ) -> Result<Config, ConfigError> {
        let located = |e: toml::de::Error| {
            let (line, column) = e.span().map(|s| line_col(text, s.start)).unwrap_or((1, 1));
            ConfigError::Invalid {
                path: shown_path.to_owned(),
                line,
                column,
                message: e.message().to_owned(),
            }
        };
        let doc = toml::de::DeTable::parse(text).map_err(located)?;
        let de = toml::de::Deserializer::from(doc.clone());
        let mut cfg = AgentSeed(sections).deserialize(de).map_err(located)?;
        for s in sections {
            cfg.sections.0.push(s.parse(&doc).map_err(located)?);
        }
        cfg.migrate(shown_path);
        cfg.validate(text, shown_path)?;
        Ok(cfg)
    }

    /// The registered section `S`: as the file wrote it, or its defaults.
    pub fn section<S: Section>(&self) -> &S {
        self.sections
            .get(std::any::TypeId::of::<S>())
            .and_then(|s| s.as_any().downcast_ref::<S>())
            .unwrap_or_else(|| section::defaults::<S>())
    }

    /// The registered section `S` to change (a test's config), its defaults
    /// first when the config holds none.
    pub fn section_mut<S: Section>(&mut self) -> &mut S {
        let id = std::any::TypeId::of::<S>();
        let at = match self
            .sections
            .0
            .iter()
            .position(|s| s.as_any().type_id() == id)
        {
            Some(at) => at,
            None => {
                self.sections.0.push(Box::new(S::default()));
                self.sections.0.len() - 1
            }
        };
        self.sections.0[at]
            .as_any_mut()
            .downcast_mut::<S>()
            .expect("the section kept under S's type id is an S")
    }

    /// Every section's own checks: the agent's, then the registered ones.
    fn validate(&self, text: &str, shown_path: &Path) -> Result<(), ConfigError> {
        let registered = self.sections.0.iter().map(|s| s.as_ref());
        for s in self.agent_sections().into_iter().chain(registered) {
            s.check().map_err(|e| {
                let (line, column) = section::locate(text, s.name(), e.key);
                ConfigError::Invalid {
                    path: shown_path.to_owned(),
                    line,
                    column,
                    message: format!("{} under [{}]: {}", e.key, s.name(), e.why),
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

/// The agent's own keys read into a `Config`; a registered section's table
/// skipped (read by its own parse), any other key refused.
struct AgentSeed<'a>(&'a [&'a dyn Declared]);

impl<'de> DeserializeSeed<'de> for AgentSeed<'_> {
    type Value = Config;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Config, D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> Visitor<'de> for AgentSeed<'_> {
    type Value = Config;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        write!(f, "the agent config")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Config, A::Error> {
        let mut cfg = Config::default();
        while let Some(key) = map.next_key::<String>()? {
            if cfg.read_agent_key(&key, &mut map)? {
                continue;
            }
            if !self.0.iter().any(|s| s.name() == key) {
                let mut known = Config::AGENT_KEYS.to_vec();
                known.extend(self.0.iter().map(|s| s.name()));
                return Err(section::unknown_table(&key, &known));
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(cfg)
    }
}

#[cfg(test)]
mod tests;
