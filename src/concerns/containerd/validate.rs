//! `containerd config dump` on the edited files before anything is written: the
//! installed containerd's own parser is the judge of what it will accept at restart.

use std::io;
use std::path::Path;

use toml_edit::{Array, DocumentMut, value};

use super::ContainerdError;
use super::toml::Version;
use crate::host::command::{SCRATCH, run_on_copies};
use crate::host::read::ReadHost;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Validation {
    Passed(String),
    Skipped(String),
}

/// Validates the files of one config set (main first, in load order), given as text.
/// They are copied into a temp dir with the main file's imports pointing at the
/// copies, so the check sees exactly the candidate files in containerd's order.
pub fn validate(
    binary: &Path,
    files: &[String],
    version: Version,
) -> Result<Validation, ContainerdError> {
    match dump(binary, files) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Validation::Skipped(format!(
            "not validated: {} not found",
            binary.display()
        ))),
        Err(e) => Err(ContainerdError::Validation(format!(
            "could not run {} config dump: {e}",
            binary.display()
        ))),
        Ok(Ok(out)) => {
            let read_as = out
                .lines()
                .find_map(|l| l.strip_prefix("version = "))
                .and_then(|v| v.trim().parse::<i64>().ok());
            if read_as != Some(version.number()) {
                return Ok(Validation::Skipped(format!(
                    "not validated: the installed containerd reads config version {} as {}",
                    version.number(),
                    read_as.map_or("unknown".into(), |v| v.to_string())
                )));
            }
            Ok(Validation::Passed(format!(
                "validated with `{} config dump`",
                binary.display()
            )))
        }
        Ok(Err(message)) => Err(ContainerdError::Validation(format!(
            "containerd rejects the edited config: {message}; nothing was written"
        ))),
    }
}

/// Like `validate`, for the files as they are now: tells a broken node from an agent bug.
pub fn current_fails(binary: &Path, files: &[String]) -> Option<String> {
    match dump(binary, files) {
        Ok(Err(message)) => Some(message),
        _ => None,
    }
}

/// containerd's own view of the files as they are (main first, in load order):
/// `containerd config dump` by the installed containerd, parsed.
pub fn view(host: &ReadHost, binary: &Path, files: &[String]) -> Result<super::view::View, String> {
    let run = |p: &Path, t: &[String], a: &[&str]| host.query_on_copies(p, t, a);
    match dump_with(&run, binary, files) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Err(format!(
            "no containerd binary ({}) to run `config dump` with: install containerd or set `binary` under [containerd] in the agent config",
            binary.display()
        )),
        Err(e) => Err(format!(
            "could not run {} config dump: {e}",
            binary.display()
        )),
        Ok(Err(message)) => Err(format!(
            "`{} config dump` fails: {message}",
            binary.display()
        )),
        Ok(Ok(out)) => super::view::from_dump(&out),
    }
}

/// How the dump runs: through the read-only view during a gather, directly
/// (before a write) in the preflight.
type Runner<'a> = &'a dyn Fn(&Path, &[String], &[&str]) -> io::Result<std::process::Output>;

fn dump(binary: &Path, files: &[String]) -> io::Result<Result<String, String>> {
    dump_with(&run_on_copies, binary, files)
}

fn dump_with(run: Runner, binary: &Path, files: &[String]) -> io::Result<Result<String, String>> {
    let names: Vec<String> = (0..files.len())
        .map(|i| format!("{SCRATCH}/{i}.toml"))
        .collect();
    let texts: Vec<String> = files
        .iter()
        .enumerate()
        .map(|(i, text)| match text.parse::<DocumentMut>() {
            // Let containerd report the syntax error in its own words.
            Err(_) => text.clone(),
            Ok(mut doc) => {
                if doc.contains_key("imports") || i == 0 {
                    let imports: Array = if i == 0 {
                        names[1..].iter().map(String::as_str).collect()
                    } else {
                        Array::new()
                    };
                    doc["imports"] = value(imports);
                }
                doc.to_string()
            }
        })
        .collect();
    let out = run(binary, &texts, &["--config", &names[0], "config", "dump"])?;
    if out.status.success() {
        Ok(Ok(String::from_utf8_lossy(&out.stdout).into_owned()))
    } else {
        let msg = String::from_utf8_lossy(&out.stderr).trim().to_owned();
        // containerd may quote a line of the file: never a credential.
        Ok(Err(crate::redact::redact(&msg).into_owned()))
    }
}
