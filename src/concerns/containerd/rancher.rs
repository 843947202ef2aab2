//! k3s/rke2 with containerd 2: they render config.toml from
//! `config-v3.toml.tmpl` first, else `config.toml.tmpl`, else their built-in
//! v3 template (k3s-io/k3s `pkg/agent/containerd/config.go`,
//! `templateGenerations`), and since k3s-io/k3s#13680 the built-in (`base`)
//! templates import `<dir>/config-v3.toml.d/*.toml`. Where the rendered
//! config.toml imports that directory, the agent writes a drop-in of its own
//! there (containerd 2 merges imports key by key) and edits no template: a
//! `{{ template "base" . }}` template that adds a `runc` table beside the
//! base's breaks containerd ("toml: table runc already exists", k3s-io/docs#566).

use std::path::{Path, PathBuf};

use super::toml::{ConfigFile, Version};
use super::{ConfigSet, ContainerdError};
use crate::host::read::ReadHost;

/// The agent's own drop-in's name, in the layout's drop-in directory.
pub const DROPIN_NAME: &str = "rdma-node-agent.toml";
const V3_DIR: &str = "config-v3.toml.d";

/// The drop-in directory the rendered config.toml imports, when the files are
/// merged key by key (version 3, containerd 2): `None` otherwise.
pub(super) fn dropin_dir(set: &ConfigSet, daemon_major: Option<u32>) -> Option<PathBuf> {
    if set.version < Version::V3 || daemon_major.is_some_and(|m| m < 2) {
        return None;
    }
    let main = &set.files[0];
    let dir = main.path.parent()?.join(V3_DIR);
    let wanted = dir.join("*.toml");
    let imports = main.get(&["imports"])?.as_array()?;
    imports
        .iter()
        .filter_map(|v| v.as_str())
        .any(|i| Path::new(i) == wanted)
        .then_some(dir)
}

/// The set with the agent's drop-in in `dir` (new, or as it is).
pub(super) fn with_dropin(
    host: &ReadHost,
    mut set: ConfigSet,
    dir: &Path,
) -> Result<ConfigSet, ContainerdError> {
    let path = dir.join(DROPIN_NAME);
    if set.files.iter().any(|f| f.path == path) {
        return Ok(set);
    }
    let mut file = ConfigFile::parse(&path, &host.path(&path), None, 0o644)?;
    file.doc.insert("version", toml_edit::value(3));
    set.files.push(file);
    Ok(set)
}

/// The agent's own drop-in in a set (k0s's or k3s/rke2's), where every edit goes.
pub fn dropin_index(set: &ConfigSet) -> Option<usize> {
    set.files
        .iter()
        .skip(1)
        .position(|f| {
            f.path == Path::new(super::k0s::DROPIN)
                || (f.path.file_name() == Some(DROPIN_NAME.as_ref())
                    && f.path.parent().and_then(Path::file_name) == Some(V3_DIR.as_ref()))
        })
        .map(|i| i + 1)
}

/// The template k3s/rke2 read (config-v3.toml.tmpl first, as they do), and the
/// one to create when there is none: named after the version config.toml has.
pub(super) fn template_name(set: &ConfigSet) -> &'static str {
    if set.version >= Version::V3 {
        "config-v3.toml.tmpl"
    } else {
        "config.toml.tmpl"
    }
}

/// Advice for a Go template the agent cannot edit. One that renders k3s's
/// `base` must not get a second `runc` table (any version: a duplicate table
/// is invalid TOML). A version 3 base that imported the drop-in directory
/// would have taken the drop-in route: this one is older than
/// k3s-io/k3s#13680, so the way is an upgrade or a plain copy of config.toml.
/// Version 2 drop-ins replace whole plugin tables on containerd 1.x: only the copy.
pub(super) fn go_template_advice(
    text: &str,
    version: Version,
    tmpl: &Path,
    main: &Path,
) -> Option<String> {
    if !text.contains("template \"base\"") {
        return None;
    }
    let (upgrade, verb) = if version >= Version::V3 {
        (
            format!(
                ", and this release's base template does not import {}/*.toml. Upgrade k3s/rke2 to a release whose base template does (k3s-io/k3s#13680): the agent then writes its own drop-in there. Or",
                main.parent()
                    .unwrap_or(Path::new("/"))
                    .join(V3_DIR)
                    .display()
            ),
            "replace",
        )
    } else {
        (".".to_owned(), "Replace")
    };
    Some(format!(
        "{} renders k3s/rke2's base template ({{{{ template \"base\" . }}}}), which already has a runc table: adding one there breaks containerd (\"table runc already exists\"){upgrade} {verb} the template with a plain copy of {} (no {{{{ }}}}), which the agent edits, then run apply again",
        tmpl.display(),
        main.display()
    ))
}
