//! The base OCI runtime spec that CRI starts every container of a handler from.
//!
//! CRI takes `base_runtime_spec` as the *whole* starting spec, so a new one must be
//! complete (namespaces, mounts…). An existing spec is patched as a JSON value:
//! only `process.rlimits` changes, every other field (known to us or not) stays.

use serde_json::{Value, json};

use crate::config::RlimitName;
use crate::host::limit::Limit;

/// `ctr oci spec` of containerd 1.6.20 with its `RLIMIT_NOFILE 1024` removed: the
/// default when the installed containerd cannot be asked (a fixture root, no `ctr`).
pub const BUILTIN_DEFAULT: &str = include_str!("default-spec.json");

/// The rlimits the agent puts in a spec: memlock, plus what the operator configured.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rlimits {
    pub memlock: Limit,
    pub extra: Vec<(RlimitName, Limit)>,
}

impl Rlimits {
    fn entries(&self) -> Vec<(String, Limit)> {
        let mut v = vec![("RLIMIT_MEMLOCK".to_owned(), self.memlock)];
        v.extend(self.extra.iter().map(|(n, l)| (n.as_str().to_owned(), *l)));
        v
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SpecError {
    #[error("is not valid JSON: {0}")]
    Json(String),
    #[error(
        "is not a complete OCI spec ({0}); CRI uses it as the whole starting spec, so containers would run without it. Fix the file or remove base_runtime_spec"
    )]
    Incomplete(String),
}

/// A new base spec: containerd's default with `process.rlimits` replaced by ours.
/// Unlisted rlimits are then inherited from containerd, as with no base spec.
pub fn generate(template: &str, limits: &Rlimits) -> Result<String, SpecError> {
    let mut spec: Value =
        serde_json::from_str(template).map_err(|e| SpecError::Json(e.to_string()))?;
    validate(&spec)?;
    spec["process"]["rlimits"] = Value::Array(
        limits
            .entries()
            .into_iter()
            .map(|(t, l)| rlimit(&t, l))
            .collect(),
    );
    Ok(render(&spec, "    ", true))
}

/// The spec at `text`, with our rlimits. `own` (the agent's file): rlimits become
/// exactly ours. Otherwise (an operator's file): ours are added or replaced, the
/// others kept. Formatting (indent, final newline) follows the original.
pub fn patch(text: &str, limits: &Rlimits, own: bool) -> Result<String, SpecError> {
    // A byte-order mark is the operator's; serde_json does not read past it.
    let body = text.strip_prefix('\u{feff}').unwrap_or(text);
    let mut spec: Value = serde_json::from_str(body).map_err(|e| SpecError::Json(e.to_string()))?;
    validate(&spec)?;
    let process = spec
        .get_mut("process")
        .and_then(Value::as_object_mut)
        .expect("validated");
    let existing: Vec<Value> = process
        .get("rlimits")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let ours = limits.entries();
    // New entries write soft and hard in the order the file's entries use.
    let model = existing.first().cloned();
    let mut out: Vec<Value> = Vec::new();
    if !own {
        // Keep the operator's entries in place, replacing the ones we set (their
        // key order included).
        for e in existing {
            let ty = e.get("type").and_then(Value::as_str).unwrap_or_default();
            match ours.iter().find(|(t, _)| t == ty) {
                Some((t, l)) => out.push(rlimit_like(Some(&e), t, *l)),
                None => out.push(e),
            }
        }
    }
    for (t, l) in &ours {
        let present = out
            .iter()
            .any(|e| e.get("type").and_then(Value::as_str) == Some(t));
        if !present {
            out.push(rlimit_like(model.as_ref(), t, *l));
        }
    }
    let rlimits = Value::Array(out);
    if let Some(edited) = super::splice::set_rlimits(text, &rlimits) {
        return Ok(edited);
    }
    process.insert("rlimits".into(), rlimits);
    let (indent, pretty) = detect_format(body);
    let mut rendered = render(&spec, &indent, pretty);
    if !text.ends_with('\n') {
        rendered.pop();
    }
    Ok(rendered)
}

/// The soft and hard RLIMIT_MEMLOCK a spec sets, if any.
pub fn memlock(text: &str) -> Option<(u64, u64)> {
    let spec: Value = serde_json::from_str(text.trim_start_matches('\u{feff}')).ok()?;
    spec.pointer("/process/rlimits")?
        .as_array()?
        .iter()
        .find(|e| e.get("type").and_then(Value::as_str) == Some("RLIMIT_MEMLOCK"))
        .and_then(|e| Some((e.get("soft")?.as_u64()?, e.get("hard")?.as_u64()?)))
}

/// The fields CRI cannot do without: a spec lacking them makes runc run the
/// container in the host's namespaces.
pub fn validate(spec: &Value) -> Result<(), SpecError> {
    let obj = spec
        .as_object()
        .ok_or_else(|| SpecError::Incomplete("not a JSON object".into()))?;
    for key in ["ociVersion", "process", "root", "mounts", "linux"] {
        if !obj.contains_key(key) {
            return Err(SpecError::Incomplete(format!("no \"{key}\"")));
        }
    }
    if !spec["process"].is_object() {
        return Err(SpecError::Incomplete("\"process\" is not an object".into()));
    }
    let has_mount_ns = spec
        .pointer("/linux/namespaces")
        .and_then(Value::as_array)
        .is_some_and(|ns| {
            ns.iter()
                .any(|n| n.get("type").and_then(Value::as_str) == Some("mount"))
        });
    if !has_mount_ns {
        return Err(SpecError::Incomplete(
            "no mount namespace in linux.namespaces".into(),
        ));
    }
    Ok(())
}

/// An entry for `ty` keyed in the order of `model` (an entry of the same file).
fn rlimit_like(model: Option<&Value>, ty: &str, l: Limit) -> Value {
    let Some(order) = model.and_then(Value::as_object) else {
        return rlimit(ty, l);
    };
    let mut e = serde_json::Map::new();
    for k in order.keys() {
        match k.as_str() {
            "type" => e.insert(k.clone(), json!(ty)),
            "soft" | "hard" => e.insert(k.clone(), json!(l.0)),
            _ => None,
        };
    }
    for k in ["type", "hard", "soft"] {
        if !e.contains_key(k) {
            e.insert(
                k.to_owned(),
                if k == "type" { json!(ty) } else { json!(l.0) },
            );
        }
    }
    Value::Object(e)
}

fn rlimit(ty: &str, l: Limit) -> Value {
    // u64 stays exact through serde_json (18446744073709551615 for unlimited).
    json!({ "type": ty, "hard": l.0, "soft": l.0 })
}

fn detect_format(text: &str) -> (String, bool) {
    let second = text.lines().nth(1);
    match second {
        None => (String::new(), false),
        Some(l) => {
            let indent: String = l.chars().take_while(|c| *c == ' ' || *c == '\t').collect();
            if indent.is_empty() {
                ("    ".into(), true)
            } else {
                (indent, true)
            }
        }
    }
}

fn render(v: &Value, indent: &str, pretty: bool) -> String {
    let mut out = Vec::new();
    if pretty {
        let fmt = serde_json::ser::PrettyFormatter::with_indent(indent.as_bytes());
        let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
        serde::Serialize::serialize(v, &mut ser).expect("JSON value serializes");
    } else {
        serde_json::to_writer(&mut out, v).expect("JSON value serializes");
    }
    out.push(b'\n');
    String::from_utf8(out).expect("serde_json writes UTF-8")
}

/// Turns `ctr oci spec` output into a template (its rlimits are dropped by `generate`).
pub fn template_from_ctr(output: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(output).ok()?;
    validate(&v).ok()?;
    Some(String::from_utf8_lossy(output).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(memlock: Limit) -> Rlimits {
        Rlimits {
            memlock,
            extra: vec![],
        }
    }

    #[test]
    fn generated_spec_has_only_memlock_and_exact_u64() {
        let s = generate(BUILTIN_DEFAULT, &limits(Limit::UNLIMITED)).unwrap();
        assert!(s.contains("18446744073709551615"));
        assert!(
            !s.contains("RLIMIT_NOFILE"),
            "the 1024 open-files limit must not come along"
        );
        assert_eq!(memlock(&s), Some((u64::MAX, u64::MAX)));
        let v: Value = serde_json::from_str(&s).unwrap();
        validate(&v).unwrap();
        assert_eq!(v["process"]["rlimits"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn operator_spec_keeps_everything_but_memlock() {
        let kubespray = r#"{
  "ociVersion": "1.0.2-dev",
  "process": {"rlimits": [{"type": "RLIMIT_NOFILE", "hard": 65535, "soft": 65535},
                          {"type": "RLIMIT_MEMLOCK", "hard": 65536, "soft": 65536}],
              "x-unknown": true},
  "root": {"path": "rootfs"}, "mounts": [],
  "linux": {"namespaces": [{"type": "mount"}]},
  "annotations": {"keep": "me"}
}"#;
        let out = patch(kubespray, &limits(Limit(4 << 20)), false).unwrap();
        let v: Value = serde_json::from_str(&out).unwrap();
        let r = v["process"]["rlimits"].as_array().unwrap();
        assert_eq!(r[0]["type"], "RLIMIT_NOFILE");
        assert_eq!(r[0]["hard"], 65535);
        assert_eq!(r[1]["type"], "RLIMIT_MEMLOCK");
        assert_eq!(r[1]["soft"], 4 << 20);
        assert_eq!(v["process"]["x-unknown"], true);
        assert_eq!(v["annotations"]["keep"], "me");
        // Key order and the two-space indent of the original are kept.
        assert!(out.starts_with("{\n  \"ociVersion\""));
        assert!(!out.ends_with('\n'));
        // Idempotent.
        assert_eq!(patch(&out, &limits(Limit(4 << 20)), false).unwrap(), out);
    }

    #[test]
    fn own_spec_drops_rlimits_no_longer_configured() {
        let with = Rlimits {
            memlock: Limit::UNLIMITED,
            extra: vec![(
                serde_json::from_value(json!("RLIMIT_NOFILE")).unwrap(),
                Limit(1 << 20),
            )],
        };
        let s = generate(BUILTIN_DEFAULT, &with).unwrap();
        assert!(s.contains("RLIMIT_NOFILE"));
        let s = patch(&s, &limits(Limit::UNLIMITED), true).unwrap();
        assert!(!s.contains("RLIMIT_NOFILE"));
    }

    #[test]
    fn incomplete_specs_are_refused() {
        let only_rlimits = r#"{"process": {"rlimits": []}}"#;
        let e = patch(only_rlimits, &limits(Limit::UNLIMITED), false).unwrap_err();
        assert!(matches!(e, SpecError::Incomplete(_)), "{e}");
        let e = patch("{not json", &limits(Limit::UNLIMITED), false).unwrap_err();
        assert!(matches!(e, SpecError::Json(_)));
    }
}
