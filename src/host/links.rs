//! Which symbolic links at a managed path the agent follows.
//!
//! Config management and NixOS-style setups link `config.toml`, imports, base
//! specs and drop-ins to the real file; someone who can write in a config
//! directory (a hostPath-mounted `conf.d`, a narrower admin group) could instead
//! point one at `/etc/shadow` to have the agent print or rewrite it. The rule:
//! a managed path whose last component is a link is followed (through at most
//! [`MAX_HOPS`] links) only when
//!
//! 1. every link stays inside the root: an absolute target is read under
//!    `--root`, a relative one from the link's directory, and a relative one
//!    that climbs above the root is refused;
//! 2. the final target exists and is a regular file (not a directory, device,
//!    FIFO or socket, and not dangling: the agent never creates a file behind a
//!    link);
//! 3. the final target, with every directory link on its way resolved, lies
//!    under one of [`LINK_DIRS`], the directories where the agent edits config.
//!
//! Otherwise the read (and so the plan) fails with [`HostError::UnsafeLink`],
//! which names the link and its target and never reads the target's content.
//! Directory links above a managed path (`/var/run` → `/run`) are followed as
//! the kernel does: they belong to whoever owns the parent directory.

use std::fs;
use std::os::unix::fs::FileTypeExt;
use std::path::{Component, Path, PathBuf};

use super::{Host, HostError, Result, missing, normalize};

/// Directories a managed path's link may lead into.
pub const LINK_DIRS: &[&str] = &[
    "/etc/containerd",
    "/etc/systemd/system",
    "/etc/modprobe.d",
    "/etc/kubernetes/node-feature-discovery",
    "/etc/rdma-node-agent",
    "/var/lib/rancher/k3s/agent/etc/containerd",
    "/var/lib/rancher/rke2/agent/etc/containerd",
    "/var/snap/microk8s/current/args",
];

/// Links followed at most, as a chain, from one managed path.
pub const MAX_HOPS: usize = 8;

/// Where a managed path really is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The host-absolute path of the file whose bytes are read and written.
    pub real: PathBuf,
    /// The link's target as stored (`readlink`), when the path is a link.
    pub link: Option<PathBuf>,
}

impl Host {
    /// Where the bytes of managed path `p` live, by the rule above.
    pub fn resolve_managed(&self, p: &Path) -> Result<Resolved> {
        let start = normalize(p);
        let mut cur = start.clone();
        let mut first: Option<PathBuf> = None;
        let refuse = |target: &Path, why: String| HostError::UnsafeLink {
            path: self.path(&start),
            target: target.to_owned(),
            why,
        };
        for _ in 0..=MAX_HOPS {
            let real = self.path(&cur);
            let meta = match fs::symlink_metadata(&real) {
                Ok(m) => m,
                Err(e) if missing(&e) && first.is_none() => {
                    return Ok(Resolved {
                        real: start,
                        link: None,
                    });
                }
                Err(e) if missing(&e) => {
                    return Err(refuse(
                        &cur,
                        "which does not exist (the agent never creates a file behind a link)"
                            .into(),
                    ));
                }
                Err(source) => return Err(HostError::Read { path: real, source }),
            };
            if !meta.file_type().is_symlink() {
                let Some(link) = first else {
                    return Ok(Resolved {
                        real: start,
                        link: None,
                    });
                };
                let ft = meta.file_type();
                if !ft.is_file() {
                    return Err(refuse(&cur, format!("which is {}", kind(&ft))));
                }
                // Directory links on the way count: the file must really be there.
                let full = self.resolve(&cur)?;
                if !LINK_DIRS.iter().any(|d| full.starts_with(d)) {
                    return Err(refuse(
                        &full,
                        format!(
                            "which is outside the directories the agent edits config in ({})",
                            LINK_DIRS.join(", ")
                        ),
                    ));
                }
                return Ok(Resolved {
                    real: full,
                    link: Some(link),
                });
            }
            let target = fs::read_link(&real).map_err(|source| HostError::Read {
                path: real.clone(),
                source,
            })?;
            first.get_or_insert_with(|| target.clone());
            cur = if target.is_absolute() {
                normalize(&target)
            } else {
                let dir = cur.parent().unwrap_or(Path::new("/"));
                join_inside(dir, &target)
                    .ok_or_else(|| refuse(&target, "which climbs above the root".into()))?
            };
        }
        Err(refuse(&cur, format!("through more than {MAX_HOPS} links")))
    }
}

/// `dir` joined with a relative link target, lexically; `None` when `..` climbs above `/`.
fn join_inside(dir: &Path, target: &Path) -> Option<PathBuf> {
    let mut out = dir.to_path_buf();
    for c in target.components() {
        match c {
            Component::ParentDir if !out.pop() => return None,
            Component::Normal(n) => out.push(n),
            _ => {}
        }
    }
    Some(out)
}

fn kind(ft: &fs::FileType) -> &'static str {
    if ft.is_dir() {
        "a directory"
    } else if ft.is_char_device() || ft.is_block_device() {
        "a device"
    } else if ft.is_fifo() {
        "a FIFO"
    } else if ft.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// For callers that must tell a refused link from other read errors.
pub fn is_unsafe_link(e: &HostError) -> bool {
    matches!(e, HostError::UnsafeLink { .. })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    fn tree() -> (tempfile::TempDir, Host) {
        let t = tempfile::tempdir().unwrap();
        fs::create_dir_all(t.path().join("etc/containerd/conf.d")).unwrap();
        fs::write(t.path().join("etc/shadow"), "root:$6$secret:1::::::\n").unwrap();
        fs::write(t.path().join("etc/containerd/real.toml"), "version = 2\n").unwrap();
        let h = Host::new(t.path());
        (t, h)
    }

    #[test]
    fn plain_files_and_absent_paths_are_themselves() {
        let (_t, h) = tree();
        for p in ["/etc/containerd/real.toml", "/etc/containerd/absent.toml"] {
            assert_eq!(
                h.resolve_managed(Path::new(p)).unwrap(),
                Resolved {
                    real: p.into(),
                    link: None
                }
            );
        }
    }

    #[test]
    fn links_to_config_files_are_followed() {
        let (t, h) = tree();
        let c = t.path().join("etc/containerd");
        symlink("real.toml", c.join("config.toml")).unwrap();
        symlink("/etc/containerd/real.toml", c.join("conf.d/abs.toml")).unwrap();
        symlink("../config.toml", c.join("conf.d/chain.toml")).unwrap();
        for (p, stored) in [
            ("/etc/containerd/config.toml", "real.toml"),
            (
                "/etc/containerd/conf.d/abs.toml",
                "/etc/containerd/real.toml",
            ),
            ("/etc/containerd/conf.d/chain.toml", "../config.toml"),
        ] {
            let r = h.resolve_managed(Path::new(p)).unwrap();
            assert_eq!(r.real, PathBuf::from("/etc/containerd/real.toml"), "{p}");
            assert_eq!(r.link, Some(PathBuf::from(stored)), "{p}");
        }
    }

    #[test]
    fn unexpected_links_are_refused_naming_link_and_target() {
        let (t, h) = tree();
        let c = t.path().join("etc/containerd");
        symlink("/etc/shadow", c.join("shadow.toml")).unwrap();
        symlink("../../../../../../etc/shadow", c.join("climb.toml")).unwrap();
        symlink("missing.toml", c.join("dangling.toml")).unwrap();
        symlink("conf.d", c.join("dir.toml")).unwrap();
        symlink("loop.toml", c.join("loop.toml")).unwrap();
        symlink("/etc", c.join("up")).unwrap();
        symlink("up/shadow", c.join("via-dir.toml")).unwrap();
        for (name, why) in [
            ("shadow.toml", "outside the directories"),
            ("climb.toml", "climbs above the root"),
            ("dangling.toml", "does not exist"),
            ("dir.toml", "a directory"),
            ("loop.toml", "more than 8 links"),
            ("via-dir.toml", "outside the directories"),
        ] {
            let e = h
                .resolve_managed(&Path::new("/etc/containerd").join(name))
                .unwrap_err()
                .to_string();
            assert!(e.contains(&format!("etc/containerd/{name}")), "{e}");
            assert!(e.contains(why), "{name}: {e}");
            assert!(!e.contains("secret"), "{e}");
        }
    }
}
