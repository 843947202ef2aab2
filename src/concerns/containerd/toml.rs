//! containerd's config.toml as a set of files (the main one and its imports), read
//! and edited with toml_edit so comments and formatting survive. Key paths are typed
//! slices of keys, never strings parsed by hand, so dotted keys, quoted keys and
//! inline tables all work.

use std::path::{Path, PathBuf};

use toml_edit::{DocumentMut, InlineTable, Item, Table, TableLike, Value};

use super::ContainerdError;
use crate::config::line_col;

/// containerd's config format versions and where each keeps the CRI runtime handlers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Version {
    V1,
    V2,
    V3,
    V4,
}

impl Version {
    pub fn from_number(n: i64) -> Option<Version> {
        match n {
            1 => Some(Version::V1),
            2 => Some(Version::V2),
            3 => Some(Version::V3),
            4 => Some(Version::V4),
            _ => None,
        }
    }

    pub fn number(self) -> i64 {
        match self {
            Version::V1 => 1,
            Version::V2 => 2,
            Version::V3 => 3,
            Version::V4 => 4,
        }
    }

    /// The key path of the plugin section that holds `containerd.runtimes`.
    pub fn runtime_plugin(self) -> [&'static str; 2] {
        match self {
            Version::V1 => ["plugins", "cri"],
            Version::V2 => ["plugins", "io.containerd.grpc.v1.cri"],
            Version::V3 | Version::V4 => ["plugins", "io.containerd.cri.v1.runtime"],
        }
    }

    pub fn runtimes_path(self) -> Vec<&'static str> {
        let mut p = self.runtime_plugin().to_vec();
        p.extend(["containerd", "runtimes"]);
        p
    }

    pub fn default_runtime_path(self) -> Vec<&'static str> {
        let mut p = self.runtime_plugin().to_vec();
        p.extend(["containerd", "default_runtime_name"]);
        p
    }

    /// Version 2 imports replace a whole plugin section; version 3 and later merge.
    pub fn imports_replace_sections(self) -> bool {
        self <= Version::V2
    }
}

/// One TOML file of containerd's configuration.
#[derive(Debug, Clone)]
pub struct ConfigFile {
    /// Host-absolute path.
    pub path: PathBuf,
    /// The bytes on disk (`None`: the file does not exist yet).
    pub original: Option<String>,
    pub doc: DocumentMut,
    pub mode: u32,
    /// Its modification time, from the same read as `original` (so a restart
    /// owed is judged on the bytes that were read, not a later write's).
    pub modified: Option<std::time::SystemTime>,
    /// The file starts with a UTF-8 byte-order mark, kept on write.
    bom: bool,
    /// The file's lines end in CRLF; lines the agent adds do too.
    crlf: bool,
}

impl ConfigFile {
    pub fn parse(
        path: &Path,
        shown: &Path,
        text: Option<String>,
        mode: u32,
    ) -> Result<ConfigFile, ContainerdError> {
        let bom = text.as_deref().is_some_and(|t| t.starts_with('\u{feff}'));
        let crlf = text.as_deref().is_some_and(|t| t.contains("\r\n"));
        let doc = match &text {
            None => DocumentMut::new(),
            Some(t) => {
                // Spans count from after the byte-order mark, as does the parser.
                let body = t.strip_prefix('\u{feff}').unwrap_or(t);
                body.parse::<DocumentMut>().map_err(|e| {
                    let (line, column) =
                        e.span().map(|s| line_col(body, s.start)).unwrap_or((1, 1));
                    ContainerdError::Syntax {
                        path: shown.to_owned(),
                        line,
                        column,
                        message: e.message().trim().to_owned(),
                    }
                })?
            }
        };
        Ok(ConfigFile {
            path: path.to_owned(),
            original: text,
            doc,
            mode,
            modified: None,
            bom,
            crlf,
        })
    }

    pub fn rendered(&self) -> String {
        let mut text = self.doc.to_string();
        if self.crlf {
            text = text.replace("\r\n", "\n").replace('\n', "\r\n");
        }
        if self.bom {
            text.insert(0, '\u{feff}');
        }
        text
    }

    /// The file writes strings as literals ('…') rather than basic strings ("…"),
    /// as containerd 2.x's `config default` does.
    fn prefers_literal(&self) -> bool {
        let t = self.original.as_deref().unwrap_or_default();
        t.matches("= '").count() > t.matches("= \"").count()
    }

    pub fn changed(&self) -> bool {
        self.original.as_deref() != Some(self.rendered().as_str())
    }

    pub fn get(&self, path: &[&str]) -> Option<&Item> {
        get(self.doc.as_item(), path)
    }

    pub fn get_str(&self, path: &[&str]) -> Option<&str> {
        self.get(path).and_then(Item::as_str)
    }

    /// Keys of a table (standard or inline) at `path`.
    pub fn keys(&self, path: &[&str]) -> Vec<String> {
        self.get(path)
            .and_then(Item::as_table_like)
            .map(|t| t.iter().map(|(k, _)| k.to_owned()).collect())
            .unwrap_or_default()
    }

    /// Sets a string value, creating missing tables on the way. Only the key changes:
    /// a new key takes the indentation of its siblings.
    pub fn set_str(&mut self, path: &[&str], value: &str) -> Result<(), ContainerdError> {
        let (leaf, parents) = path.split_last().expect("non-empty key path");
        let file_literal = self.prefers_literal();
        let table =
            ensure_table(self.doc.as_item_mut(), parents).map_err(|at| ContainerdError::Shape {
                path: self.path.clone(),
                key: at,
            })?;
        match table.get_mut(leaf) {
            Some(item) if item.is_value() => {
                // Keep the value's surrounding whitespace and trailing comment,
                // and its quote style.
                let literal = item.as_value().map_or(file_literal, is_literal);
                let decor = item.as_value().map(|v| v.decor().clone());
                let mut v = string(value, literal);
                if let Some(d) = decor {
                    *v.decor_mut() = d;
                }
                *item = Item::Value(v);
            }
            Some(_) => {
                return Err(ContainerdError::Shape {
                    path: self.path.clone(),
                    key: path.join("."),
                });
            }
            None => {
                let indent = sibling_indent(table);
                let literal = table
                    .iter()
                    .find_map(|(_, v)| v.as_value().filter(|v| v.is_str()).map(is_literal))
                    .unwrap_or(file_literal);
                table.insert(leaf, Item::Value(string(value, literal)));
                if let (Some(indent), Some(mut key)) = (indent, table.key_mut(leaf)) {
                    key.leaf_decor_mut().set_prefix(indent);
                }
            }
        }
        Ok(())
    }
}

/// A string value written as a literal ('…') when asked and possible.
fn string(value: &str, literal: bool) -> Value {
    if literal && !value.contains(['\'', '\n', '\r']) {
        if let Ok(v) = format!("'{value}'").parse::<Value>() {
            return v;
        }
    }
    Value::from(value)
}

fn is_literal(v: &Value) -> bool {
    match v {
        Value::String(s) => s
            .as_repr()
            .and_then(|r| r.as_raw().as_str())
            .is_some_and(|r| r.starts_with('\'')),
        _ => false,
    }
}

fn get<'a>(mut item: &'a Item, path: &[&str]) -> Option<&'a Item> {
    for k in path {
        item = item.as_table_like()?.get(k)?;
    }
    Some(item)
}

/// Walks to the table at `path`, creating missing levels. A level created under a
/// standard table is an implicit standard table, so the file reads
/// `[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]`; under a dotted
/// or inline table it takes the parent's style. A key on the way that holds a
/// value rather than a table is an error (returned as the dotted key), never overwritten.
fn ensure_table<'a>(
    mut item: &'a mut Item,
    path: &[&str],
) -> Result<&'a mut dyn TableLike, String> {
    for (i, k) in path.iter().enumerate() {
        let child = match &*item {
            Item::Table(t) if t.is_dotted() => {
                let mut t = Table::new();
                t.set_dotted(true);
                Item::Table(t)
            }
            Item::Table(_) => {
                let mut t = Table::new();
                t.set_implicit(true);
                Item::Table(t)
            }
            _ => Item::Value(Value::InlineTable(InlineTable::new())),
        };
        let parent = item
            .as_table_like_mut()
            .ok_or_else(|| path[..i].join("."))?;
        match parent.get(k) {
            None => {
                parent.insert(k, child);
            }
            Some(existing) if !existing.is_table_like() => return Err(path[..=i].join(".")),
            Some(_) => {}
        }
        item = parent.get_mut(k).expect("present");
    }
    // A table that now holds a key of its own needs its own header.
    if let Item::Table(t) = item {
        t.set_implicit(false);
    }
    item.as_table_like_mut().ok_or_else(|| path.join("."))
}

fn sibling_indent(t: &dyn TableLike) -> Option<String> {
    let (k, _) = t.iter().find(|(_, v)| v.is_value())?;
    let key = t.key(k)?;
    let prefix = key.leaf_decor().prefix()?.as_str()?;
    // Only reuse pure indentation, never a sibling's comment.
    prefix
        .rsplit('\n')
        .next()
        .filter(|p| p.chars().all(|c| c == ' ' || c == '\t'))
        .map(str::to_owned)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syntax_error_after_a_byte_order_mark_has_its_line_and_column() {
        let t = "\u{feff}version = 2\nbroken = [\n";
        let e =
            ConfigFile::parse(Path::new("/c"), Path::new("/c"), Some(t.into()), 0o644).unwrap_err();
        assert!(e.to_string().starts_with("/c:2:11: "), "{e}");
    }

    #[test]
    fn crlf_bom_and_literal_strings_are_kept_on_edit() {
        let t = "\u{feff}version = 2\r\n[a]\r\n  x = 'y'\r\n";
        let mut f =
            ConfigFile::parse(Path::new("/c"), Path::new("/c"), Some(t.into()), 0o644).unwrap();
        f.set_str(&["a", "z"], "/p").unwrap();
        assert_eq!(
            f.rendered(),
            "\u{feff}version = 2\r\n[a]\r\n  x = 'y'\r\n  z = '/p'\r\n"
        );
    }
}
