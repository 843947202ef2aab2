//! A minimal edit of an operator's base spec: only the text of `process.rlimits`
//! is replaced (or inserted), so indentation (tabs, two or four spaces, one
//! line), key order, line endings, a byte-order mark and every other value stay
//! byte for byte as the operator wrote them.

use serde_json::Value;

/// An object member: its key, where the key starts, and its value's span.
type Member = (String, usize, (usize, usize));

/// Byte spans in a JSON text: where a member's value lies, and where an object ends.
struct Scanner<'a> {
    s: &'a [u8],
    i: usize,
}

impl<'a> Scanner<'a> {
    fn ws(&mut self) {
        while self.i < self.s.len() && matches!(self.s[self.i], b' ' | b'\t' | b'\r' | b'\n') {
            self.i += 1;
        }
    }

    fn string(&mut self) -> Option<String> {
        let start = self.i;
        if self.s.get(self.i) != Some(&b'"') {
            return None;
        }
        self.i += 1;
        while self.i < self.s.len() {
            match self.s[self.i] {
                b'\\' => self.i += 2,
                b'"' => {
                    self.i += 1;
                    return serde_json::from_slice(&self.s[start..self.i]).ok();
                }
                _ => self.i += 1,
            }
        }
        None
    }

    /// Skips one value; its span.
    fn value(&mut self) -> Option<(usize, usize)> {
        self.ws();
        let start = self.i;
        match *self.s.get(self.i)? {
            b'"' => {
                self.string()?;
            }
            b'{' | b'[' => {
                let mut depth = 0usize;
                while self.i < self.s.len() {
                    match self.s[self.i] {
                        b'"' => {
                            self.string()?;
                            continue;
                        }
                        b'{' | b'[' => depth += 1,
                        b'}' | b']' => {
                            depth -= 1;
                            if depth == 0 {
                                self.i += 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                    self.i += 1;
                }
            }
            _ => {
                while self.i < self.s.len()
                    && !matches!(self.s[self.i], b',' | b'}' | b']')
                    && !self.s[self.i].is_ascii_whitespace()
                {
                    self.i += 1;
                }
            }
        }
        Some((start, self.i))
    }

    /// The members of the object starting at `self.i`: (key, key start, value
    /// span), and the offset of its closing brace.
    fn members(&mut self) -> Option<(Vec<Member>, usize)> {
        self.ws();
        if self.s.get(self.i) != Some(&b'{') {
            return None;
        }
        self.i += 1;
        let mut out = Vec::new();
        loop {
            self.ws();
            match *self.s.get(self.i)? {
                b'}' => return Some((out, self.i)),
                b',' => {
                    self.i += 1;
                    continue;
                }
                _ => {}
            }
            let key_at = self.i;
            let key = self.string()?;
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return None;
            }
            self.i += 1;
            let span = self.value()?;
            out.push((key, key_at, span));
        }
    }
}

/// `text` with `process.rlimits` set to `rlimits`, touching nothing else; `None`
/// when the text's shape is not one this can edit (the caller re-renders).
pub fn set_rlimits(text: &str, rlimits: &Value) -> Option<String> {
    let (bom, body) = match text.strip_prefix('\u{feff}') {
        Some(b) => ("\u{feff}", b),
        None => ("", text),
    };
    let nl = if body.contains("\r\n") { "\r\n" } else { "\n" };
    let mut sc = Scanner {
        s: body.as_bytes(),
        i: 0,
    };
    let (top, _) = sc.members()?;
    let (_, _, (p_start, _)) = top.iter().find(|(k, _, _)| k == "process")?.clone();
    let mut sc = Scanner {
        s: body.as_bytes(),
        i: p_start,
    };
    let (members, close) = sc.members()?;
    let pretty = body[p_start..close].contains('\n');
    // A one-line spec keeps its separators: `{"a":1,"b":2}` (Go, serde) or
    // `{"a": 1, "b": 2}` (Python's json.dumps, as Ansible's copy writes it).
    let seps = Separators {
        colon: if body.contains("\": ") { ": " } else { ":" },
        comma: if body.contains(", \"") || body.contains(", {") {
            ", "
        } else {
            ","
        },
    };
    let line_indent = |at: usize| -> String {
        let line_start = body[..at].rfind('\n').map_or(0, |i| i + 1);
        body[line_start..at]
            .chars()
            .take_while(|c| *c == ' ' || *c == '\t')
            .collect()
    };
    let (out, start, end) = match members.iter().find(|(k, _, _)| k == "rlimits") {
        Some((_, key_at, (vs, ve))) => {
            let indent = line_indent(*key_at);
            let existing = &body[*vs..*ve];
            let array = render(
                rlimits,
                &indent,
                unit(body),
                pretty && existing.contains('\n'),
                nl,
                &seps,
            );
            (array, *vs, *ve)
        }
        None => {
            let (_, key_at, (_, last_end)) = members.last()?;
            if pretty {
                let indent = line_indent(*key_at);
                let array = render(rlimits, &indent, unit(body), true, nl, &seps);
                (
                    format!(",{nl}{indent}\"rlimits\": {array}"),
                    *last_end,
                    *last_end,
                )
            } else {
                let array = render(rlimits, "", "", false, nl, &seps);
                let Separators { colon, comma } = seps;
                (
                    format!("{comma}\"rlimits\"{colon}{array}"),
                    *last_end,
                    *last_end,
                )
            }
        }
    };
    let new = format!("{bom}{}{out}{}", &body[..start], &body[end..]);
    // Never trust the splice blindly: it must mean exactly the intended spec.
    let mut want: Value = serde_json::from_str(body).ok()?;
    want["process"]["rlimits"] = rlimits.clone();
    let got: Value = serde_json::from_str(new.trim_start_matches('\u{feff}')).ok()?;
    (got == want).then_some(new)
}

/// The file's indentation step: the indent of its first indented line.
fn unit(body: &str) -> &str {
    body.lines()
        .map(|l| &l[..l.len() - l.trim_start_matches([' ', '\t']).len()])
        .find(|i| !i.is_empty())
        .unwrap_or("    ")
}

/// How a one-line JSON text separates a key from its value and one item from the next.
#[derive(Clone, Copy)]
struct Separators {
    colon: &'static str,
    comma: &'static str,
}

impl serde_json::ser::Formatter for Separators {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(self.comma.as_bytes())
        }
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        self.begin_array_value(w, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(self.colon.as_bytes())
    }
}

/// The array rendered at a member whose line is indented by `indent`.
fn render(
    v: &Value,
    indent: &str,
    unit: &str,
    pretty: bool,
    nl: &str,
    seps: &Separators,
) -> String {
    if !pretty {
        let mut out = Vec::new();
        let mut ser = serde_json::Serializer::with_formatter(&mut out, *seps);
        serde::Serialize::serialize(v, &mut ser).expect("JSON value serializes");
        return String::from_utf8(out).expect("serde_json writes UTF-8");
    }
    let mut out = Vec::new();
    let fmt = serde_json::ser::PrettyFormatter::with_indent(unit.as_bytes());
    let mut ser = serde_json::Serializer::with_formatter(&mut out, fmt);
    serde::Serialize::serialize(v, &mut ser).expect("JSON value serializes");
    let text = String::from_utf8(out).expect("serde_json writes UTF-8");
    text.lines()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                l.to_owned()
            } else {
                format!("{indent}{l}")
            }
        })
        .collect::<Vec<_>>()
        .join(nl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rl() -> Value {
        json!([{"type": "RLIMIT_MEMLOCK", "hard": 1, "soft": 1}])
    }

    #[test]
    fn tabs_crlf_and_bom_are_kept() {
        let text = "\u{feff}{\r\n\t\"ociVersion\": \"1.0.2\",\r\n\t\"process\": {\r\n\t\t\"cwd\": \"/\"\r\n\t},\r\n\t\"root\": {}\r\n}\r\n";
        let out = set_rlimits(text, &rl()).unwrap();
        assert!(out.starts_with("\u{feff}{\r\n\t\"ociVersion\": \"1.0.2\",\r\n"));
        assert!(
            out.contains("\t\t\"cwd\": \"/\",\r\n\t\t\"rlimits\": [\r\n\t\t\t{\r\n"),
            "{out:?}"
        );
        assert!(
            !out.replace("\r\n", "").contains('\n'),
            "only CRLF: {out:?}"
        );
        assert!(out.ends_with("\t},\r\n\t\"root\": {}\r\n}\r\n"));
    }

    #[test]
    fn one_line_stays_one_line() {
        let text = r#"{"ociVersion":"1.0.2","process":{"cwd":"/","rlimits":[{"type":"RLIMIT_NOFILE","hard":9,"soft":9}]},"root":{}}"#;
        let out = set_rlimits(text, &rl()).unwrap();
        assert_eq!(
            out,
            r#"{"ociVersion":"1.0.2","process":{"cwd":"/","rlimits":[{"type":"RLIMIT_MEMLOCK","hard":1,"soft":1}]},"root":{}}"#
        );
    }

    /// Kubespray's cri-base.json: Ansible's copy writes a dict as Python's
    /// json.dumps, one line with ", " and ": ".
    #[test]
    fn one_line_keeps_python_style_separators() {
        let text = r#"{"ociVersion": "1.2.1", "process": {"cwd": "/", "rlimits": [{"type": "RLIMIT_NOFILE", "hard": 9, "soft": 9}], "noNewPrivileges": true}, "root": {}}"#;
        let out = set_rlimits(text, &rl()).unwrap();
        assert_eq!(
            out,
            r#"{"ociVersion": "1.2.1", "process": {"cwd": "/", "rlimits": [{"type": "RLIMIT_MEMLOCK", "hard": 1, "soft": 1}], "noNewPrivileges": true}, "root": {}}"#
        );
        let text = r#"{"ociVersion": "1.2.1", "process": {"cwd": "/"}, "root": {}}"#;
        let out = set_rlimits(text, &rl()).unwrap();
        assert_eq!(
            out,
            r#"{"ociVersion": "1.2.1", "process": {"cwd": "/", "rlimits": [{"type": "RLIMIT_MEMLOCK", "hard": 1, "soft": 1}]}, "root": {}}"#
        );
    }

    #[test]
    fn an_existing_array_is_replaced_in_place_with_the_files_indent() {
        let text = "{\n    \"process\": {\n        \"rlimits\": [\n            {\"type\": \"RLIMIT_NOFILE\", \"hard\": 9, \"soft\": 9}\n        ],\n        \"cwd\": \"/\"\n    }\n}";
        let out = set_rlimits(text, &rl()).unwrap();
        assert!(out.starts_with("{\n    \"process\": {\n        \"rlimits\": [\n            {\n                \"type\": \"RLIMIT_MEMLOCK\","), "{out}");
        assert!(
            out.ends_with("        ],\n        \"cwd\": \"/\"\n    }\n}"),
            "{out}"
        );
    }
}
