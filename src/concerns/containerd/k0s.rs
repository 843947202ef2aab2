//! k0s's containerd, as k0sproject/k0s `pkg/component/worker/containerd` runs
//! it: while /etc/k0s/containerd.toml is absent or its first line is
//! `# k0s_managed=true`, k0s rewrites it at every start (k0s ≥ 1.36, containerd
//! 2: `version = 3` and `imports = ["/etc/k0s/containerd.d/*.toml"]`, which
//! containerd merges itself), and it watches containerd.d and restarts its
//! containerd on any change there. So the agent edits neither that file nor an
//! admin's drop-in: every edit goes to a drop-in of its own. A containerd.toml
//! without the marker is the admin's, which k0s leaves alone: edited as any config.
//!
//! containerd is a plain child of the k0s process (`pkg/supervisor`: exec, no
//! rlimit set), so it inherits the limits of the k0s unit that runs it.

use std::path::Path;

use super::toml::{ConfigFile, Version};
use super::{ConfigSet, ContainerdError};
use crate::host::read::ReadHost;

/// The agent's own drop-in, merged by containerd after k0s's file.
pub const DROPIN: &str = "/etc/k0s/containerd.d/rdma-node-agent.toml";
/// The base spec's default place on k0s: not a `*.toml`, so neither merged
/// nor validated by k0s (its sysprobe checks `containerd.d/*.toml`).
pub const SPEC: &str = "/etc/k0s/containerd.d/rdma-node-agent-base-spec.json";
/// k0s's `isK0sManagedConfig`: the first line, exactly.
const MARKER: &str = "# k0s_managed=true";

/// Whether k0s owns (and rewrites) its containerd.toml: its first line is the
/// marker. An absent file is k0s's too, written at its next start.
pub fn managed(text: Option<&str>) -> bool {
    text.is_none_or(|t| t.lines().next().map(|l| l.trim_end_matches('\r')) == Some(MARKER))
}

/// Before the set is loaded: what the agent cannot do right on k0s, refused
/// with what to do instead.
pub(super) fn refuse(host: &ReadHost, main: &Path) -> Result<(), ContainerdError> {
    let text = host
        .read_trusted(main, "k0s's containerd config")?
        .map(|d| String::from_utf8_lossy(&d.bytes).into_owned());
    let shown = host.path(main);
    match text {
        None => Err(ContainerdError::Rancher(format!(
            "{} does not exist yet: k0s writes it when it starts containerd. Start k0s (k0s start), then run apply again: the agent writes its own drop-in {DROPIN}",
            shown.display()
        ))),
        Some(t) if managed(Some(&t)) && version(&t) != Some(3) => {
            Err(ContainerdError::Rancher(format!(
                "{} is managed by a k0s before 1.36 (containerd 1.x), which merges the CRI sections of /etc/k0s/containerd.d/*.toml into its own /run/k0s/containerd-cri.toml; the agent does not model that merge. Upgrade k0s to 1.36 or later, or take the file over (remove its first line `{MARKER}`, as k0s's docs/runtime.md says) and run apply again",
                shown.display()
            )))
        }
        Some(_) => Ok(()),
    }
}

fn version(text: &str) -> Option<i64> {
    let doc: toml_edit::DocumentMut = text.parse().ok()?;
    doc.get("version")?.as_integer()
}

/// The loaded set, with the agent's drop-in (new, or as it is) when k0s owns
/// the main file; unchanged when the admin does.
pub(super) fn with_dropin(
    host: &ReadHost,
    mut set: ConfigSet,
) -> Result<ConfigSet, ContainerdError> {
    if !managed(set.files[0].original.as_deref()) {
        return Ok(set);
    }
    if super::rancher::dropin_index(&set).is_some() {
        return Ok(set);
    }
    if set.version != Version::V3 {
        return Err(ContainerdError::Rancher(format!(
            "{}: k0s's containerd.toml is not `version = 3`; the agent writes its drop-in only beside a k0s 1.36 or later",
            host.path(&set.files[0].path).display()
        )));
    }
    let path = Path::new(DROPIN);
    let mut file = ConfigFile::parse(path, &host.path(path), None, 0o644)?;
    // k0s ≥ 1.36 refuses drop-ins of any other version (its docs/runtime.md).
    file.doc.insert("version", toml_edit::value(3));
    set.files.push(file);
    Ok(set)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_marker_is_the_first_line_exactly() {
        assert!(managed(None));
        assert!(managed(Some("# k0s_managed=true\nversion = 3\n")));
        assert!(managed(Some("# k0s_managed=true\r\nversion = 3\r\n")));
        assert!(!managed(Some("version = 3\n# k0s_managed=true\n")));
        assert!(!managed(Some("# k0s_managed=false\n")));
        assert!(!managed(Some("")));
    }
}
