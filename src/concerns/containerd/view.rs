//! containerd's own view of its config: which CRI handlers exist, which is the
//! default, and which base spec each uses, as containerd itself reports them.
//! `containerd.memlock` is only `ok` when this view agrees: before a restart
//! (and under `--root`) from `containerd config dump` of the config its unit
//! really reads; on the live host from the running containerd's CRI `Status`.

use serde_json::Value;

/// One CRI runtime handler as containerd reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewHandler {
    pub name: String,
    /// `base_runtime_spec` (empty: none).
    pub base_spec: String,
    pub runtime_type: String,
}

impl ViewHandler {
    /// runhcs runs Windows containers, which have no rlimits.
    pub fn linux(&self) -> bool {
        !self.runtime_type.contains("runhcs")
    }
}

/// containerd's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct View {
    /// What answered: "`containerd config dump`" or "the running containerd's CRI Status".
    pub source: String,
    /// The `disabled_plugins` entry that turns CRI off, when one does.
    pub cri_disabled: Option<String>,
    pub handlers: Vec<ViewHandler>,
    pub default: String,
}

impl View {
    pub fn get(&self, name: &str) -> Option<&ViewHandler> {
        self.handlers.iter().find(|h| h.name == name)
    }
}

/// The plugin ids that disable CRI when listed in `disabled_plugins` (1.x's
/// `cri` short id, its full id, and 2.x's split plugins).
pub const CRI_IDS: &[&str] = &[
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

/// The entry of `disabled_plugins` that turns CRI off, if any.
pub fn cri_disabled_by<'a>(disabled: impl IntoIterator<Item = &'a str>) -> Option<String> {
    disabled
        .into_iter()
        .find(|d| CRI_IDS.contains(d))
        .map(str::to_owned)
}

/// Parses `containerd config dump` (1.x prints version 2, 2.x version 3).
pub fn from_dump(text: &str) -> Result<View, String> {
    let doc: toml::Table = text
        .parse()
        .map_err(|e| format!("`containerd config dump` printed no TOML: {e}"))?;
    let disabled: Vec<&str> = doc
        .get("disabled_plugins")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let cri_disabled = cri_disabled_by(disabled);
    let plugins = doc.get("plugins").and_then(|p| p.as_table());
    let section = ["io.containerd.cri.v1.runtime", "io.containerd.grpc.v1.cri"]
        .iter()
        .find_map(|id| plugins?.get(*id)?.get("containerd")?.as_table());
    let Some(section) = section else {
        if cri_disabled.is_some() {
            return Ok(View {
                source: "`containerd config dump`".into(),
                cri_disabled,
                handlers: Vec::new(),
                default: String::new(),
            });
        }
        return Err("`containerd config dump` shows no CRI runtime section".into());
    };
    let s = |t: &toml::Table, k: &str| t.get(k).and_then(|v| v.as_str()).unwrap_or("").to_owned();
    let mut handlers: Vec<ViewHandler> = section
        .get("runtimes")
        .and_then(|r| r.as_table())
        .map(|r| {
            r.iter()
                .filter_map(|(name, t)| {
                    let t = t.as_table()?;
                    Some(ViewHandler {
                        name: name.clone(),
                        base_spec: s(t, "base_runtime_spec"),
                        runtime_type: s(t, "runtime_type"),
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut default = s(section, "default_runtime_name");
    // containerd 1.x's CRI turns a legacy table with a runtime type into a
    // handler (`default` then serves every pod without a RuntimeClass).
    for (key, name) in [
        ("default_runtime", "default"),
        ("untrusted_workload_runtime", "untrusted"),
    ] {
        if let Some(t) = section.get(key).and_then(|v| v.as_table()) {
            if !s(t, "runtime_type").is_empty() {
                handlers.retain(|h| h.name != name);
                handlers.push(ViewHandler {
                    name: name.to_owned(),
                    base_spec: s(t, "base_runtime_spec"),
                    runtime_type: s(t, "runtime_type"),
                });
                if name == "default" {
                    default = name.to_owned();
                }
            }
        }
    }
    handlers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(View {
        source: "`containerd config dump`".into(),
        cri_disabled,
        handlers,
        default,
    })
}

/// Parses the `config` entry of CRI `Status` (verbose): the CRI plugin's
/// effective config as JSON (`containerd.runtimes.<h>.baseRuntimeSpec`).
pub fn from_cri_status(config_json: &str) -> Result<View, String> {
    let v: Value = serde_json::from_str(config_json)
        .map_err(|e| format!("CRI Status's `config` is not JSON: {e}"))?;
    let c = v
        .get("containerd")
        .ok_or("CRI Status's `config` has no `containerd` section")?;
    let s = |t: &Value, k: &str| t.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
    let mut handlers: Vec<ViewHandler> = c
        .get("runtimes")
        .and_then(Value::as_object)
        .map(|r| {
            r.iter()
                .map(|(name, t)| ViewHandler {
                    name: name.clone(),
                    base_spec: s(t, "baseRuntimeSpec"),
                    runtime_type: s(t, "runtimeType"),
                })
                .collect()
        })
        .unwrap_or_default();
    handlers.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(View {
        source: "the running containerd's CRI Status".into(),
        cri_disabled: None,
        handlers,
        default: s(c, "defaultRuntimeName"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dump_of_both_generations() {
        let v1 = "version = 2\ndisabled_plugins = []\n[plugins]\n[plugins.\"io.containerd.grpc.v1.cri\"]\n[plugins.\"io.containerd.grpc.v1.cri\".containerd]\ndefault_runtime_name = \"runc\"\n[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]\nbase_runtime_spec = \"/etc/s.json\"\nruntime_type = \"io.containerd.runc.v2\"\n";
        let v = from_dump(v1).unwrap();
        assert_eq!(v.default, "runc");
        assert_eq!(v.get("runc").unwrap().base_spec, "/etc/s.json");
        let v3 = "version = 3\n[plugins.'io.containerd.cri.v1.runtime'.containerd]\ndefault_runtime_name = 'nvidia'\n[plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.nvidia]\nbase_runtime_spec = ''\nruntime_type = 'io.containerd.runc.v2'\n";
        let v = from_dump(v3).unwrap();
        assert_eq!(v.default, "nvidia");
        assert_eq!(v.get("nvidia").unwrap().base_spec, "");
    }

    #[test]
    fn cri_off_by_short_or_full_id() {
        let v = from_dump("disabled_plugins = [\"cri\"]\n").unwrap();
        assert_eq!(v.cri_disabled.as_deref(), Some("cri"));
        assert_eq!(
            cri_disabled_by(["io.containerd.grpc.v1.cri"]).as_deref(),
            Some("io.containerd.grpc.v1.cri")
        );
        assert_eq!(
            cri_disabled_by(["io.containerd.snapshotter.v1.btrfs"]),
            None
        );
    }

    #[test]
    fn cri_status_config() {
        let json = r#"{"containerd":{"defaultRuntimeName":"runc","runtimes":{"runc":{"runtimeType":"io.containerd.runc.v2","baseRuntimeSpec":"/etc/s.json"}}}}"#;
        let v = from_cri_status(json).unwrap();
        assert_eq!(v.get("runc").unwrap().base_spec, "/etc/s.json");
        assert!(from_cri_status("{}").is_err());
    }
}
