//! Each config section checks its own values beyond their types, where the
//! section is defined (as zincati's config fragments do): a value the agent
//! would act on wrongly, or silently ignore, is refused at load with the key,
//! its line and what to write.

use std::path::Path;

/// A section of the agent config.
pub trait Section {
    /// Its table name (`daemon`, `rdma`, …).
    const NAME: &'static str;

    /// `Err((key, why))` for the first value that cannot be used.
    fn validate(&self) -> Result<(), (&'static str, String)>;
}

/// A section as `Config::sections` lists it: its name and its checks.
pub trait AnySection {
    fn name(&self) -> &'static str;
    fn check(&self) -> Result<(), (&'static str, String)>;
}

impl<S: Section> AnySection for S {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn check(&self) -> Result<(), (&'static str, String)> {
        self.validate()
    }
}

/// An absolute path, or why not.
pub fn absolute(key: &'static str, p: &Path) -> Result<(), (&'static str, String)> {
    if p.is_absolute() {
        Ok(())
    } else {
        Err((key, format!("{} is not an absolute path", p.display())))
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
}
