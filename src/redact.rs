//! Secrets never leave the file: every text the agent shows from a host file
//! (diffs in `plan`, `plan --json`, `apply`, the daemon's logs and `/status`)
//! passes through here first, context lines included.
//!
//! Masked, in TOML (containerd) and JSON (base specs) alike:
//! - the value of any key that names a credential: `auth`, `password`,
//!   `identitytoken`, `token`, `registrytoken`, `authorization`, `headers` and
//!   any key containing `password`, `passwd`, `secret` or ending in `token`,
//!   inline tables and multi-line arrays/strings included;
//! - every value in a table that holds credentials: containerd's
//!   `registry.configs.<host>.auth` and `registry.headers` (any version);
//! - `NAME=value` strings (OCI `process.env`, systemd `Environment=`) whose
//!   name looks like a credential.
//!
//! The agent never edits these lines, so masking the old and the new text alike
//! keeps the diff exact everywhere else.

use std::borrow::Cow;

pub const MASK: &str = "\"<redacted>\"";

/// A key whose value is a credential.
pub fn is_secret_key(key: &str) -> bool {
    let k = key
        .trim()
        .trim_matches(|c| c == '"' || c == '\'')
        .to_ascii_lowercase();
    matches!(
        k.as_str(),
        "auth" | "identitytoken" | "identity_token" | "authorization" | "headers" | "x-api-key"
    ) || k.contains("password")
        || k.contains("passwd")
        || k.contains("secret")
        || k.ends_with("token")
        || k.ends_with("apikey")
        || k.ends_with("api_key")
}

/// `text` with every credential value replaced by [`MASK`].
pub fn redact(text: &str) -> Cow<'_, str> {
    if !text.lines().any(might_hold_secret) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len());
    let mut secret_table = false;
    // Inside a masked multi-line value: its closing delimiter.
    let mut until: Option<Closer> = None;
    for line in text.split_inclusive('\n') {
        let (body, nl) = match line.strip_suffix('\n') {
            Some(b) => (b, "\n"),
            None => (line, ""),
        };
        if let Some(c) = until.take() {
            if !c.closes(body) {
                until = Some(c);
            }
            out.push_str(indent(body));
            out.push_str("<redacted>");
            out.push_str(nl);
            continue;
        }
        let trimmed = body.trim_start();
        let code = trimmed.split('#').next().unwrap_or("").trim_end();
        if code.starts_with('[') && code.ends_with(']') {
            if let Some(segs) = toml_header(code) {
                secret_table = is_secret_table(&segs);
                out.push_str(body);
                out.push_str(nl);
                continue;
            }
        }
        match split_key_value(body) {
            Some((key_part, value)) if secret_table || last_segment_secret(key_part) => {
                // The key and separator exactly as written, then the mask.
                out.push_str(&body[..=key_part.len()]);
                out.push(' ');
                out.push_str(MASK);
                if value.trim_end().ends_with(',') {
                    out.push(',');
                }
                until = Closer::open(value);
            }
            _ => out.push_str(&mask_env_words(&mask_inline(body))),
        }
        out.push_str(nl);
    }
    Cow::Owned(out)
}

fn might_hold_secret(line: &str) -> bool {
    let l = line.to_ascii_lowercase();
    ["auth", "pass", "secret", "token", "header", "key"]
        .iter()
        .any(|w| l.contains(w))
}

fn indent(s: &str) -> &str {
    &s[..s.len() - s.trim_start().len()]
}

/// A TOML table header's dotted segments, unquoted and lowercased.
fn toml_header(t: &str) -> Option<Vec<String>> {
    let inner = t
        .trim_start_matches('[')
        .split(']')
        .next()?
        .trim()
        .to_owned();
    if inner.is_empty() {
        return None;
    }
    Some(split_dotted(&inner))
}

fn split_dotted(s: &str) -> Vec<String> {
    let mut segs = Vec::new();
    let mut cur = String::new();
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '"' | '\'') => quote = Some(c),
            (None, '.') => segs.push(std::mem::take(&mut cur).trim().to_ascii_lowercase()),
            (None, c) => cur.push(c),
        }
    }
    segs.push(cur.trim().to_ascii_lowercase());
    segs
}

/// containerd's `registry.configs.<host>.auth` and `registry.headers` tables.
fn is_secret_table(segs: &[String]) -> bool {
    segs.iter().any(|s| s == "registry")
        && (segs.last().is_some_and(|s| s == "auth") || segs.iter().any(|s| s == "headers"))
}

fn last_segment_secret(key_part: &str) -> bool {
    split_dotted(key_part.trim())
        .last()
        .is_some_and(|k| is_secret_key(k))
}

/// `key = value` (TOML) or `"key": value` (JSON): the key part (with its
/// indentation) and the value; `None` for other lines.
fn split_key_value(line: &str) -> Option<(&str, &str)> {
    let t = line.trim_start();
    if t.starts_with('#') || t.is_empty() {
        return None;
    }
    let mut quote: Option<char> = None;
    for (i, c) in line.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '=' | ':') => {
                let key = &line[..i];
                // A JSON key is a whole quoted string; a TOML key is bare or dotted.
                let k = key.trim();
                if k.is_empty() || (c == ':' && !(k.starts_with('"') && k.ends_with('"'))) {
                    return None;
                }
                return Some((key, &line[i + 1..]));
            }
            (None, '{' | '[' | ',') => return None,
            _ => {}
        }
    }
    None
}

/// Secrets inside a line that is not itself a secret key: inline tables
/// (`auth = {username = "u", password = "p"}` in a larger value), JSON objects
/// on one line, `NAME=value` environment strings.
fn mask_inline(line: &str) -> Cow<'_, str> {
    let mut out = String::new();
    let mut rest = line;
    let mut changed = false;
    while let Some(start) = rest.find(['"', '\'']) {
        let q = rest.as_bytes()[start] as char;
        let Some(len) = rest[start + 1..].find(q) else {
            break;
        };
        let s = &rest[start + 1..start + 1 + len];
        out.push_str(&rest[..start + 1]);
        // NAME=value inside a string (env).
        match s.split_once('=') {
            Some((name, _)) if !name.contains(' ') && is_secret_key(name) => {
                out.push_str(name);
                out.push_str("=<redacted>");
                changed = true;
            }
            _ => out.push_str(s),
        }
        out.push(q);
        rest = &rest[start + 2 + len..];
        // A quoted key followed by `:`/`=` and a secret: mask the value.
        if is_secret_key(s) {
            let after = rest.trim_start();
            if let Some(v) = after.strip_prefix([':', '=']) {
                let (masked, used) = mask_value(v);
                if used > 0 {
                    out.push_str(&rest[..rest.len() - after.len() + 1]);
                    out.push(' ');
                    out.push_str(masked);
                    rest = &v[used..];
                    changed = true;
                }
            }
        }
    }
    out.push_str(rest);
    // Bare TOML keys in inline tables: `password = "…"`.
    let mut result = out;
    for key in [
        "password",
        "auth",
        "identitytoken",
        "token",
        "registrytoken",
    ] {
        result = mask_bare(&result, key, &mut changed);
    }
    if changed {
        Cow::Owned(result)
    } else {
        Cow::Borrowed(line)
    }
}

/// Unquoted `NAME=value` words (`Environment=HTTP_TOKEN=x`) with a credential name.
fn mask_env_words(line: &str) -> String {
    line.split(' ')
        .map(|word| {
            let parts: Vec<&str> = word.split('=').collect();
            match parts[..parts.len().saturating_sub(1)]
                .iter()
                .position(|p| is_secret_key(p.trim_matches('"')))
            {
                Some(i) if !word.contains("<redacted>") => {
                    let keep: usize = parts[..=i].iter().map(|p| p.len() + 1).sum();
                    format!("{}<redacted>", &word[..keep])
                }
                _ => word.to_owned(),
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The masked text for a value at the start of `v`, and how many bytes it spans.
fn mask_value(v: &str) -> (&'static str, usize) {
    let lead = v.len() - v.trim_start().len();
    let t = &v[lead..];
    let end = match t.chars().next() {
        Some(q @ ('"' | '\'')) => t[1..].find(q).map(|i| i + 2),
        Some('{') => t.find('}').map(|i| i + 1),
        Some('[') => t.find(']').map(|i| i + 1),
        _ => t.find([',', '}', ' ']).or(Some(t.len())),
    };
    match end {
        Some(e) if e > 0 => (MASK, lead + e),
        _ => (MASK, 0),
    }
}

fn mask_bare(line: &str, key: &str, changed: &mut bool) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find(key) {
        let before_ok = rest[..i]
            .chars()
            .last()
            .is_none_or(|c| c == ' ' || c == '{' || c == ',' || c == '.');
        let after = &rest[i + key.len()..];
        let trimmed = after.trim_start();
        if before_ok && trimmed.starts_with('=') && !trimmed[1..].trim_start().starts_with(MASK) {
            let v = &trimmed[1..];
            let (m, used) = mask_value(v);
            if used > 0 {
                out.push_str(&rest[..i + key.len()]);
                out.push_str(" = ");
                out.push_str(m);
                rest = &v[used..];
                *changed = true;
                continue;
            }
        }
        out.push_str(&rest[..i + key.len()]);
        rest = after;
    }
    out.push_str(rest);
    out
}

/// The end of a multi-line value opened on a masked line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Closer {
    Bracket(i32),
    Triple(&'static str),
}

impl Closer {
    fn open(value: &str) -> Option<Closer> {
        let v = value.trim();
        for q in ["\"\"\"", "'''"] {
            if let Some(rest) = v.strip_prefix(q) {
                return (!rest.contains(q)).then_some(Closer::Triple(q));
            }
        }
        let depth = bracket_depth(v);
        (depth > 0).then_some(Closer::Bracket(depth))
    }

    /// Whether `line` closes it; a bracket closer counts down in place.
    fn closes(self, line: &str) -> bool {
        match self {
            Closer::Triple(q) => line.contains(q),
            Closer::Bracket(d) => d + bracket_depth(line) <= 0,
        }
    }
}

fn bracket_depth(s: &str) -> i32 {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '"' | '\'') => quote = Some(c),
            (None, '[' | '{') => depth += 1,
            (None, ']' | '}') => depth -= 1,
            (None, '#') => break,
            _ => {}
        }
    }
    depth
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRETS: &[&str] = &["hunter2", "dXNlcjpodW50ZXIy", "eyJidG9rZW4", "Bearer abc"];

    fn clean(text: &str) -> String {
        let r = redact(text).into_owned();
        for s in SECRETS {
            assert!(!r.contains(s), "{s} left in:\n{r}");
        }
        r
    }

    #[test]
    fn registry_auth_tables_and_keys_are_masked() {
        let text = r#"version = 2
[plugins."io.containerd.grpc.v1.cri".registry.configs."r.example".auth]
  username = "robot"
  password = "hunter2"
  auth = "dXNlcjpodW50ZXIy"
  identitytoken = "eyJidG9rZW4"
[plugins."io.containerd.grpc.v1.cri".registry.headers]
  Authorization = [
    "Bearer abc",
  ]
[plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
  runtime_type = "io.containerd.runc.v2"
  inline = { password = "hunter2", user = "x" }
  "r2".auth = { username = "u", password = "hunter2" }
"#;
        let r = clean(text);
        assert!(
            r.contains("runtime_type = \"io.containerd.runc.v2\""),
            "{r}"
        );
        assert!(r.contains("  password = \"<redacted>\"\n"), "{r}");
        assert!(
            r.contains("  username = \"<redacted>\"\n"),
            "the whole auth table: {r}"
        );
        assert_eq!(r.lines().count(), text.lines().count());
        // After the secret table, ordinary values show again.
        assert!(r.contains("[plugins.\"io.containerd.grpc.v1.cri\".containerd.runtimes.runc]"));
    }

    #[test]
    fn json_specs_and_env_strings_are_masked() {
        let text = r#"{
  "process": {
    "env": ["PATH=/usr/bin", "REGISTRY_TOKEN=eyJidG9rZW4", "DB_PASSWORD=hunter2"],
    "password": "hunter2"
  }
}"#;
        let r = clean(text);
        assert!(r.contains("PATH=/usr/bin"), "{r}");
    }

    #[test]
    fn text_without_secrets_is_untouched() {
        let t = "[Service]\nLimitMEMLOCK=infinity\n";
        assert!(matches!(redact(t), Cow::Borrowed(_)));
        let t = "a = 1\nkey_path = \"/x\"\n";
        assert_eq!(redact(t), t);
    }
}
