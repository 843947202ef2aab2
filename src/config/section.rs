//! A section of the agent config: each checks its own values beyond their
//! types where it is defined (as zincati's config fragments do), so a value
//! the agent would act on wrongly, or silently ignore, is refused at load with
//! the key, its line and what to write. A concern's section lives in its own
//! folder and is registered in `concerns::registry::SECTIONS`; `Config` routes
//! each `[table]` of the file to the section of that name and names none of them.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::path::Path;
use std::sync::{Mutex, OnceLock};

use serde::de::{self, DeserializeOwned, Deserializer, IgnoredAny, MapAccess, Visitor};

/// A value a section cannot use: the key (under the section) and what is
/// wrong with it, said so the operator knows what to write instead.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {why}")]
pub struct Invalid {
    pub key: &'static str,
    pub why: String,
}

impl Invalid {
    pub fn new(key: &'static str, why: String) -> Self {
        Invalid { key, why }
    }
}

/// A section of the agent config: a `[table]` of the file, its keys the
/// struct's fields (strict: `#[serde(deny_unknown_fields, default)]`), its
/// defaults `Default`, its checks `validate`.
pub trait Section:
    Default + Clone + PartialEq + fmt::Debug + DeserializeOwned + Send + Sync + 'static
{
    /// Its table name (`daemon`, `pcie`, …).
    const NAME: &'static str;

    /// The first value that cannot be used.
    fn validate(&self) -> Result<(), Invalid>;
}

/// A section held by `Config`, whatever its type: its name, checks, equality.
pub trait AnySection: Any + fmt::Debug + Send + Sync {
    fn name(&self) -> &'static str;
    fn check(&self) -> Result<(), Invalid>;
    fn as_any(&self) -> &dyn Any;
    fn as_any_mut(&mut self) -> &mut dyn Any;
    fn clone_box(&self) -> Box<dyn AnySection>;
    /// The same values as `other` (a section of the same type), or, with
    /// none, as the defaults.
    fn same(&self, other: Option<&dyn AnySection>) -> bool;
}

impl<S: Section> AnySection for S {
    fn name(&self) -> &'static str {
        S::NAME
    }
    fn check(&self) -> Result<(), Invalid> {
        self.validate()
    }
    fn as_any(&self) -> &dyn Any {
        self
    }
    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
    fn clone_box(&self) -> Box<dyn AnySection> {
        Box::new(self.clone())
    }
    fn same(&self, other: Option<&dyn AnySection>) -> bool {
        match other {
            Some(o) => o.as_any().downcast_ref::<S>() == Some(self),
            None => *self == *defaults::<S>(),
        }
    }
}

/// The file, parsed once (spans kept); each section reads its table from a
/// copy, so a bad value keeps its line and column.
pub type Doc<'a> = toml::Spanned<toml::de::DeTable<'a>>;

/// A registered section as the parser sees it: its table name, and how to
/// read it out of the whole file.
pub trait Declared: Sync {
    fn name(&self) -> &'static str;
    /// The section as the file writes it (its defaults when the file has no
    /// such table).
    fn parse(&self, doc: &Doc<'_>) -> Result<Box<dyn AnySection>, toml::de::Error>;
}

/// The registration of section `S`: `&Declare::<PcieConfig>::NEW` in
/// `concerns::registry::SECTIONS`.
pub struct Declare<S>(PhantomData<fn() -> S>);

impl<S> Declare<S> {
    pub const NEW: Self = Declare(PhantomData);
}

impl<S: Section> Declared for Declare<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }
    fn parse(&self, doc: &Doc<'_>) -> Result<Box<dyn AnySection>, toml::de::Error> {
        use serde::Deserialize;
        let only = Only::<S>::deserialize(toml::de::Deserializer::from(doc.clone()))?;
        Ok(Box::new(only.0.unwrap_or_default()))
    }
}

/// The file read for one section: its table, every other top-level key
/// skipped (the agent's own parse refuses the unknown ones).
struct Only<S>(Option<S>);

impl<'de, S: Section> serde::Deserialize<'de> for Only<S> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<S>(PhantomData<S>);
        impl<'de, S: Section> Visitor<'de> for V<S> {
            type Value = Only<S>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "a config file")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Only<S>, A::Error> {
                let mut found = None;
                while let Some(key) = map.next_key::<String>()? {
                    if key == S::NAME {
                        found = Some(map.next_value::<S>()?);
                    } else {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
                Ok(Only(found))
            }
        }
        d.deserialize_map(V(PhantomData))
    }
}

/// The built-in defaults of section `S`, made once per type and kept for the
/// process (a section the file does not write, read through `Config::section`).
pub fn defaults<S: Section>() -> &'static S {
    type Made = HashMap<TypeId, &'static (dyn Any + Send + Sync)>;
    static MADE: OnceLock<Mutex<Made>> = OnceLock::new();
    let mut made = MADE
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    let any = *made
        .entry(TypeId::of::<S>())
        .or_insert_with(|| Box::leak(Box::new(S::default())));
    any.downcast_ref::<S>()
        .expect("the defaults kept under S's type id are an S")
}

/// The error for a top-level key no section reads: serde's wording (which
/// tests/docs.rs reads the documented keys from), with the closest known
/// name when one is a typo away.
pub fn unknown_table<E: de::Error>(key: &str, known: &[&'static str]) -> E {
    let hint = known
        .iter()
        .map(|k| (distance(key, k), k))
        .filter(|(d, k)| *d <= 2 && *d < k.len())
        .min()
        .map(|(_, k)| format!(" (did you mean `{k}`?)"))
        .unwrap_or_default();
    let list: Vec<String> = known.iter().map(|k| format!("`{k}`")).collect();
    E::custom(format!(
        "unknown field `{key}`{hint}, expected one of {}",
        list.join(", ")
    ))
}

/// Levenshtein distance, for the typo hint.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// An absolute path, or why not.
pub fn absolute(key: &'static str, p: &Path) -> Result<(), Invalid> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err(Invalid::new(
            key,
            format!("{} is not an absolute path", p.display()),
        ))
    }
}

/// 1-based line and column of `key` in `[section]` (of the section's header
/// when the key is not written there; 1:1 when neither is).
pub fn locate(text: &str, section: &str, key: &str) -> (usize, usize) {
    let header = format!("[{section}]");
    let mut in_section = section.is_empty();
    let mut header_line = None;
    for (i, line) in text.lines().enumerate() {
        let t = line.trim_start();
        if t.starts_with('[') {
            in_section = t.starts_with(&header);
            if in_section {
                header_line.get_or_insert(i + 1);
            }
            continue;
        }
        let written = t
            .strip_prefix(key)
            .is_some_and(|rest| rest.trim_start().starts_with('='));
        if in_section && written {
            return (i + 1, line.len() - t.len() + 1);
        }
    }
    (header_line.unwrap_or(1), 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_key_in_its_section() {
        let text = "mode = \"report\"\n[daemon]\n  interval_secs = 0\n[rdma]\ninterval_secs = 1\n";
        assert_eq!(locate(text, "daemon", "interval_secs"), (3, 3));
        assert_eq!(locate(text, "daemon", "debounce_ms"), (2, 1));
        assert_eq!(locate(text, "http", "listen"), (1, 1));
    }

    #[test]
    fn a_typo_of_a_known_table_is_named() {
        let e: toml::de::Error = unknown_table("pcei", &["mode", "pcie", "kubelet"]);
        assert!(
            e.to_string()
                .contains("unknown field `pcei` (did you mean `pcie`?), expected one of `mode`, `pcie`, `kubelet`"),
            "{e}"
        );
        let e: toml::de::Error = unknown_table("zzz", &["mode", "pcie"]);
        assert!(!e.to_string().contains("did you mean"), "{e}");
    }
}
