//! Which symbolic links on a managed path the agent follows.
//!
//! Config management and NixOS-style setups link `config.toml`, imports, base
//! specs and drop-ins to the real file, often out of `/etc` (`/opt`, `/srv`);
//! someone who can write in a config directory (a hostPath-mounted `conf.d`, a
//! narrower admin group) could instead point one at `/etc/shadow` to have the
//! agent print or rewrite it. The rule is the one the agent applies to the files
//! that decide what it writes (`trust`, like sshd's StrictModes): links on a
//! managed path are followed (at most [`MAX_HOPS`] of them, a loop is an error)
//! only when
//!
//! 1. every link stays inside the root: an absolute target is read under
//!    `--root` (as sysfs links are), a relative one from the link's directory,
//!    and a relative one that climbs above the root is refused;
//! 2. every link, every directory on the way (the link's path and the target's,
//!    from the root down) and the final target are owned by root (or the agent's
//!    own user, for `--root` trees) and, but for links, not writable by group or
//!    others (a sticky directory is allowed): only root could have made the chain;
//! 3. a link the path ends in leads to an existing regular file (not a
//!    directory, device, FIFO or socket, and not dangling: the agent never
//!    creates a file behind such a link).
//!
//! Otherwise the read (and so the plan) fails with [`HostError::UnsafeLink`],
//! which names the link, its target and the element that broke the rule, and
//! never reads the target's content. A path with no link on it is not checked
//! here (`trust` decides for the files that need it). The path returned has
//! every link resolved, so a write or a removal goes to the file the check
//! looked at, inside the root, whatever the kernel would make of an absolute link.
//!
//! The rule is for the admin's files the agent edits in place; at the files the
//! agent writes whole a link is never followed (`own`).

use std::ffi::OsString;
use std::fs::{self, Metadata};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Component, Path, PathBuf};

use super::trust::untrusted;
use super::{Host, HostError, Result, missing, normalize};

/// Links followed at most, as a chain, from one managed path.
pub const MAX_HOPS: usize = 8;

/// Where a managed path really is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// The host-absolute path of the file whose bytes are read and written,
    /// with no link left on it.
    pub real: PathBuf,
    /// The link's target as stored (`readlink`), when the path itself is a link.
    pub link: Option<PathBuf>,
}

/// A name still to walk; `last` marks the name the managed path ends in (after
/// links: the last name of the target of a link it ends in).
struct Step {
    name: OsString,
    last: bool,
}

/// What the walk met: each must be trusted once a link was followed.
struct Seen {
    path: PathBuf,
    meta: Metadata,
    role: &'static str,
}

impl Host {
    /// Where the bytes of managed path `p` live, by the rule above.
    pub fn resolve_managed(&self, p: &Path) -> Result<Resolved> {
        if self.is_own(p) {
            return self.resolve_own(p);
        }
        self.walk(p, true)
    }

    /// Where the entry `p` names lives, with the links above it resolved by the
    /// same rule but not a link `p` itself is: what a removal or a restored link
    /// replaces.
    pub fn resolve_entry(&self, p: &Path) -> Result<PathBuf> {
        self.walk(p, false).map(|r| r.real)
    }

    fn walk(&self, p: &Path, follow_last: bool) -> Result<Resolved> {
        let start = normalize(p);
        let mut todo: Vec<Step> = steps(names(&start), true).collect();
        let refuse = |target: &Path, why: String| HostError::UnsafeLink {
            path: self.path(&start),
            target: target.to_owned(),
            why,
        };
        let mut done = PathBuf::from("/");
        let mut seen: Vec<Seen> = Vec::new();
        let mut visited: Vec<(PathBuf, usize)> = Vec::new();
        // The stored target of the link the path ends in, once followed.
        let mut link: Option<PathBuf> = None;
        while let Some(step) = todo.pop() {
            if step.name == ".." {
                if !done.pop() {
                    return Err(refuse(&done, "which climbs above the root".into()));
                }
                continue;
            }
            let cand = done.join(&step.name);
            let real = self.path(&cand);
            let meta = match fs::symlink_metadata(&real) {
                Ok(m) if m.is_dir() || todo.is_empty() || m.file_type().is_symlink() => m,
                Err(source) if !missing(&source) => {
                    return Err(HostError::Read { path: real, source });
                }
                // Nothing there, or a file where a directory should be.
                _ => return self.not_there(&start, &cand, &todo, link, &seen),
            };
            if !meta.file_type().is_symlink() {
                let role = if todo.is_empty() {
                    "the target"
                } else {
                    "a directory"
                };
                seen.push(Seen {
                    path: cand.clone(),
                    meta,
                    role,
                });
                done = cand;
                continue;
            }
            if step.last && !follow_last {
                done = cand;
                break;
            }
            self.hop(&mut visited, &cand, todo.len())
                .map_err(|why| refuse(&cand, why))?;
            let target = fs::read_link(&real).map_err(|source| HostError::Read {
                path: real.clone(),
                source,
            })?;
            seen.push(Seen {
                path: cand.clone(),
                meta,
                role: "a link",
            });
            if step.last {
                link.get_or_insert_with(|| target.clone());
            }
            if target.is_absolute() {
                done = PathBuf::from("/");
            }
            todo.extend(steps(target_names(&target), step.last));
        }
        if visited.is_empty() {
            return Ok(Resolved {
                real: start,
                link: None,
            });
        }
        self.finish(&start, done, link, &seen)
    }

    /// A walk that followed links: one the path ends in must have led to a
    /// regular file, and every element seen must be root's.
    fn finish(
        &self,
        start: &Path,
        done: PathBuf,
        link: Option<PathBuf>,
        seen: &[Seen],
    ) -> Result<Resolved> {
        if link.is_some() {
            // `..` or `/` can end a link's target: what is there must be a file.
            let real = self.path(&done);
            let ft = fs::symlink_metadata(&real)
                .map_err(|source| HostError::Read { path: real, source })?
                .file_type();
            if !ft.is_file() {
                return Err(HostError::UnsafeLink {
                    path: self.path(start),
                    target: done,
                    why: format!("which is {}", kind(&ft)),
                });
            }
        }
        self.trusted_chain(start, &done, seen)?;
        Ok(Resolved { real: done, link })
    }

    /// Records following the link at `cand` with `left` steps still to walk.
    /// The same link with as much left to walk is a cycle (`a -> .` on
    /// `a/a/x` is not one, the kernel follows it and so does the walk);
    /// `Err` says why the walk stops.
    fn hop(
        &self,
        visited: &mut Vec<(PathBuf, usize)>,
        cand: &Path,
        left: usize,
    ) -> std::result::Result<(), String> {
        let here = (cand.to_path_buf(), left);
        if visited.contains(&here) {
            return Err(format!(
                "which is a loop: {} leads back to itself",
                self.path(cand).display()
            ));
        }
        if visited.len() == MAX_HOPS {
            return Err(format!("through more than {MAX_HOPS} links"));
        }
        visited.push(here);
        Ok(())
    }

    /// The walk found nothing at `cand` (or a file where a directory should be).
    /// Without a link on the way, the path is itself (a file to create); behind a
    /// link the path ends in, the link dangles; behind a directory link, the new
    /// file goes where that link leads.
    fn not_there(
        &self,
        start: &Path,
        cand: &Path,
        todo: &[Step],
        link: Option<PathBuf>,
        seen: &[Seen],
    ) -> Result<Resolved> {
        let refuse = |why: &str| HostError::UnsafeLink {
            path: self.path(start),
            target: cand.to_owned(),
            why: why.to_owned(),
        };
        if !seen.iter().any(|s| s.role == "a link") {
            return Ok(Resolved {
                real: start.to_owned(),
                link: None,
            });
        }
        if link.is_some() || todo.iter().any(|s| s.name == "..") {
            return Err(refuse(
                "which does not exist (the agent never creates a file behind a link)",
            ));
        }
        let mut real = cand.to_owned();
        real.extend(todo.iter().rev().map(|s| &s.name));
        self.trusted_chain(start, &real, seen)?;
        Ok(Resolved { real, link: None })
    }

    /// Refuses the chain unless the root and every element the walk met are trusted.
    fn trusted_chain(&self, start: &Path, target: &Path, seen: &[Seen]) -> Result<()> {
        // `--root` itself may be given as a link: what counts is the directory.
        let root = fs::metadata(&self.root).map_err(|source| HostError::Read {
            path: self.root.clone(),
            source,
        })?;
        let root = Seen {
            path: PathBuf::from("/"),
            meta: root,
            role: "a directory",
        };
        for s in std::iter::once(&root).chain(seen) {
            let m = &s.meta;
            let is_link = s.role == "a link";
            // A link's own mode is always 0777 and means nothing: only its owner counts.
            let mode = if is_link { 0 } else { m.mode() };
            let Some(why) = untrusted(m.uid(), mode, m.is_dir()) else {
                continue;
            };
            let what = if is_link {
                format!("a link, owned by uid {}", m.uid())
            } else {
                format!(
                    "{}, owned by uid {}, gid {}, mode {:04o}",
                    s.role,
                    m.uid(),
                    m.gid(),
                    m.mode() & 0o7777
                )
            };
            return Err(HostError::UnsafeLink {
                path: self.path(start),
                target: target.to_owned(),
                why: format!(
                    "but {} ({what}) is {why}, so someone besides root could have chosen what it leads to",
                    self.path(&s.path).display()
                ),
            });
        }
        Ok(())
    }
}

/// A path's names, in order.
fn names(p: &Path) -> Vec<OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            _ => None,
        })
        .collect()
}

/// A link target's names, `..` kept: the walk climbs them.
fn target_names(target: &Path) -> Vec<OsString> {
    target
        .components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_owned()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

/// The steps for these names in the order the walk pops them (the first
/// name last); with `last`, the final name is the one the path ends in.
fn steps(names: Vec<OsString>, last: bool) -> impl Iterator<Item = Step> {
    let n = names.len();
    names
        .into_iter()
        .enumerate()
        .rev()
        .map(move |(i, name)| Step {
            name,
            last: last && i + 1 == n,
        })
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
    matches!(e, HostError::UnsafeLink { .. } | HostError::OwnLink { .. })
}

#[cfg(test)]
#[path = "links_tests.rs"]
mod tests;
