//! Which pod and container a process belongs to, from what the kernel shows
//! of it: its cgroup path (kubelet's cgroupfs and systemd drivers) and, for a
//! containerd shim, its command line. Shared by every concern that looks at pods.

/// The `-id` argument of a containerd shim's NUL-separated command line.
pub fn parse_shim_id(cmdline: &str) -> Option<String> {
    let mut args = cmdline.split('\0');
    let argv0 = args.next()?;
    let name = argv0.rsplit('/').next()?;
    if !name.starts_with("containerd-shim") {
        return None;
    }
    args.skip_while(|a| *a != "-id" && *a != "--id")
        .nth(1)
        .filter(|id| !id.is_empty())
        .map(str::to_owned)
}

/// Pod identity from a `/proc/<pid>/cgroup` text, for cgroupfs and systemd drivers:
/// `/kubepods/besteffort/pod<uid>/<id>` or
/// `/kubepods.slice/…/kubepods-besteffort-pod<uid_>.slice/cri-containerd-<id>.scope`.
/// A runtime's monitor is no container's process: CRI-O's conmon, in a
/// `crio-conmon-<id>.scope` beside the container's own when `conmon_cgroup =
/// "pod"` (OpenShift's), and Podman's `libpod-conmon-<id>` are `None`.
pub fn parse_cgroup(text: &str) -> Option<(Option<String>, Option<String>)> {
    let path = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find(|p| p.contains("kubepods"))?;
    if path
        .split('/')
        .any(|seg| seg.starts_with("crio-conmon-") || seg.starts_with("libpod-conmon-"))
    {
        return None;
    }
    let mut pod = None;
    let mut container = None;
    for seg in path.split('/') {
        if let Some(uid) = seg.strip_prefix("pod") {
            pod = Some(uid.to_owned());
        } else if let Some(rest) = seg.strip_suffix(".slice") {
            if let Some(i) = rest.rfind("-pod") {
                pod = Some(rest[i + 4..].replace('_', "-"));
            }
        }
        let id = seg
            .trim_end_matches(".scope")
            .rsplit('-')
            .next()
            .unwrap_or(seg);
        if id.len() == 64 && id.bytes().all(|b| b.is_ascii_hexdigit()) {
            container = Some(id.to_owned());
        }
    }
    Some((pod, container))
}

/// Where the kubelet keeps its pods' cgroups, found from one pod process's
/// `/proc/<pid>/cgroup`: the v1 devices hierarchy when the path is there (its
/// `devices.list` is the container's device rules), else the unified one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tree {
    /// The mounted hierarchy, e.g. `/sys/fs/cgroup/devices` or `/sys/fs/cgroup`.
    pub mount: &'static str,
    /// Its path down to the kubelet's root, e.g. `/kubepods` or
    /// `/kubelet.slice/kubelet-kubepods.slice`.
    pub prefix: String,
}

impl Tree {
    /// From a pod process's cgroup text, with whether the unified hierarchy
    /// is mounted at /sys/fs/cgroup itself (not at .../unified, as on hybrid hosts).
    pub fn locate(text: &str, unified_at_top: bool) -> Option<Tree> {
        let mut unified = None;
        for l in text.lines() {
            let mut f = l.splitn(3, ':');
            let (_, ctrl, path) = (f.next()?, f.next()?, f.next()?);
            let Some(prefix) = kubepods_prefix(path) else {
                continue;
            };
            if ctrl.split(',').any(|c| c == "devices") {
                return Some(Tree {
                    mount: "/sys/fs/cgroup/devices",
                    prefix,
                });
            }
            if ctrl.is_empty() {
                unified = Some(prefix);
            }
        }
        let mount = match unified_at_top {
            true => "/sys/fs/cgroup",
            false => "/sys/fs/cgroup/unified",
        };
        unified.map(|prefix| Tree { mount, prefix })
    }

    /// Where the kubelet puts it with its default cgroup root, found without
    /// asking any process: the v1 devices hierarchy first, then the unified
    /// one; the systemd driver's name, then cgroupfs'.
    pub fn known(host: &super::read::ReadHost) -> Option<Tree> {
        let unified = match host.exists(std::path::Path::new("/sys/fs/cgroup/cgroup.controllers")) {
            true => "/sys/fs/cgroup",
            false => "/sys/fs/cgroup/unified",
        };
        ["/sys/fs/cgroup/devices", unified]
            .into_iter()
            .flat_map(|mount| ["/kubepods.slice", "/kubepods"].map(|prefix| (mount, prefix)))
            .find(|(mount, prefix)| host.is_dir(&std::path::Path::new(mount).join(&prefix[1..])))
            .map(|(mount, prefix)| Tree {
                mount,
                prefix: prefix.to_owned(),
            })
    }

    /// Whether the tree's paths are the v1 devices hierarchy's.
    pub fn is_devices(&self) -> bool {
        self.mount == "/sys/fs/cgroup/devices"
    }
}

/// The path down to and with its first segment naming kubepods.
fn kubepods_prefix(path: &str) -> Option<String> {
    let end = path.find("kubepods")?;
    let seg_end = path[end..].find('/').map_or(path.len(), |i| end + i);
    Some(path[..seg_end].to_owned())
}

/// A container's cgroup in the kubelet's tree, and the processes in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContainerCgroup {
    pub pod: Option<String>,
    pub container: String,
    /// Its path in the tree's hierarchy (as /proc/<pid>/cgroup shows it).
    pub path: String,
    /// `cgroup.procs`, ascending; `Err` says why it could not be read.
    pub procs: Result<Vec<u32>, String>,
}

/// Every container cgroup under the tree (QoS classes and pods above them),
/// with its processes: a read per container, where asking each process for its
/// cgroup costs a read per process. The kubelet places processes only in
/// container cgroups; a process it did not place (CRI-O's conmon, in the pod's
/// own cgroup) is not a container's. `None` when the tree cannot be walked or
/// is not a cgroup filesystem (a container directory without `cgroup.procs`,
/// or one removed while walking): ask each process then.
pub fn containers(host: &super::read::ReadHost, tree: &Tree) -> Option<Vec<ContainerCgroup>> {
    let base = std::path::Path::new(tree.mount).join(tree.prefix.trim_start_matches('/'));
    let dir = host.open_subdir(base.parent()?, base.file_name()?.to_str()?)?;
    let mut out = Vec::new();
    visit(&dir, &tree.prefix, 0, &mut out).ok()?.then_some(out)
}

/// Adds the container cgroups under `dir` (at `path`); false when one has no
/// `cgroup.procs`.
fn visit(
    dir: &super::Dir<'_>,
    path: &str,
    depth: usize,
    out: &mut Vec<ContainerCgroup>,
) -> super::Result<bool> {
    for name in dir.subdirs()? {
        let path = format!("{path}/{name}");
        match parse_cgroup(&format!("0::{path}")) {
            Some((pod, Some(container))) => {
                let mut procs = Vec::new();
                let mut budget = MAX_SUBCGROUPS;
                let procs = match procs_under(dir, &name, 0, &mut procs, &mut budget) {
                    Ok(false) => return Ok(false),
                    Ok(true) if budget == 0 && procs.is_empty() => Err(format!(
                        "{MAX_SUBCGROUPS} of its cgroups read, none with a process: read no further (a bound against a container making empty cgroups)"
                    )),
                    Ok(true) => {
                        procs.sort_unstable();
                        Ok(procs)
                    }
                    Err(e) => Err(e.to_string()),
                };
                out.push(ContainerCgroup {
                    pod,
                    container,
                    path,
                    procs,
                });
            }
            // QoS classes and pods: kubepods/<qos>/pod<uid>/<container> at most.
            _ if depth < 3 => {
                if let Some(sub) = dir.subdir(&name) {
                    if !visit(&sub, &path, depth + 1, out)? {
                        return Ok(false);
                    }
                }
            }
            _ => {}
        }
    }
    Ok(true)
}

/// Sub-cgroups of one container read at most, looking for its processes: a
/// container can create any number of empty ones.
pub const MAX_SUBCGROUPS: usize = 512;

/// The processes of cgroup `name` in `dir`; where it has none, those of the
/// cgroups under it (a container running its own init, systemd, moves its
/// processes into sub-cgroups such as init.scope), reading at most `budget`
/// cgroups (left at 0 when it ran out). False when it has no `cgroup.procs`.
fn procs_under(
    dir: &super::Dir<'_>,
    name: &str,
    depth: usize,
    out: &mut Vec<u32>,
    budget: &mut usize,
) -> super::Result<bool> {
    if *budget == 0 {
        return Ok(true);
    }
    *budget -= 1;
    let before = out.len();
    match dir.read_string(&format!("{name}/cgroup.procs"))? {
        Some(t) => out.extend(t.lines().filter_map(|l| l.parse::<u32>().ok())),
        None => return Ok(false),
    }
    if out.len() == before && depth < 4 {
        if let Some(sub) = dir.subdir(name) {
            for child in sub.subdirs()? {
                if !procs_under(&sub, &child, depth + 1, out, budget)? {
                    return Ok(false);
                }
            }
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A container that made thousands of empty sub-cgroups: the walk reads
    /// no more than the bound and says so; one whose processes lie in a
    /// sub-cgroup (systemd's init.scope) is still found.
    #[test]
    fn the_walk_under_a_container_is_bounded() {
        let t = tempfile::tempdir().unwrap();
        let pod = t.path().join("sys/fs/cgroup/kubepods/besteffort/pod1");
        let other = "fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210";
        for id in [ID, other] {
            std::fs::create_dir_all(pod.join(id)).unwrap();
            std::fs::write(pod.join(id).join("cgroup.procs"), "").unwrap();
        }
        for i in 0..2 * MAX_SUBCGROUPS {
            let d = pod.join(ID).join(format!("s{i}"));
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join("cgroup.procs"), "").unwrap();
        }
        let init = pod.join(other).join("init.scope");
        std::fs::create_dir_all(&init).unwrap();
        std::fs::write(init.join("cgroup.procs"), "42\n").unwrap();
        let host = crate::host::Host::new(t.path()).reader();
        let tree = Tree {
            mount: "/sys/fs/cgroup",
            prefix: "/kubepods".into(),
        };
        let found = containers(&host, &tree).unwrap();
        let procs = |id: &str| {
            found
                .iter()
                .find(|c| c.container == id)
                .unwrap()
                .procs
                .clone()
        };
        let e = procs(ID).unwrap_err();
        assert!(
            e.contains("512 of its cgroups read, none with a process"),
            "{e}"
        );
        assert_eq!(procs(other), Ok(vec![42]));
    }

    #[test]
    fn the_tree_is_found_from_a_pod_process() {
        let v1 = format!(
            "12:pids:/kubepods/besteffort/pod1/{ID}\n7:devices:/kubepods/besteffort/pod1/{ID}\n0::/\n"
        );
        assert_eq!(
            Tree::locate(&v1, false),
            Some(Tree {
                mount: "/sys/fs/cgroup/devices",
                prefix: "/kubepods".into()
            })
        );
        let v2 = format!(
            "0::/kubelet.slice/kubelet-kubepods.slice/kubelet-kubepods-pod1.slice/cri-containerd-{ID}.scope\n"
        );
        let t = Tree::locate(&v2, true).unwrap();
        assert_eq!(
            (t.mount, t.prefix.as_str(), t.is_devices()),
            (
                "/sys/fs/cgroup",
                "/kubelet.slice/kubelet-kubepods.slice",
                false
            )
        );
        // Hybrid: no devices line with the path, the unified one beside v1.
        let hybrid = format!("1:name=systemd:/\n0::/kubepods/pod1/{ID}\n");
        assert_eq!(
            Tree::locate(&hybrid, false).unwrap().mount,
            "/sys/fs/cgroup/unified"
        );
        assert_eq!(Tree::locate("0::/user.slice\n", true), None);
    }

    const ID: &str = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";

    #[test]
    fn cgroupfs_and_systemd_paths() {
        let v1 = format!("4:memory:/kubepods/besteffort/pod1234-ab/{ID}\n0::/\n");
        assert_eq!(
            parse_cgroup(&v1),
            Some((Some("1234-ab".into()), Some(ID.into())))
        );
        let sd = format!(
            "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12_34.slice/cri-containerd-{ID}.scope\n"
        );
        assert_eq!(
            parse_cgroup(&sd),
            Some((Some("12-34".into()), Some(ID.into())))
        );
        assert_eq!(parse_cgroup("0::/user.slice\n"), None);
        // CRI-O with conmon_cgroup = "pod": conmon's scope beside the container's.
        let pod = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod12_34.slice";
        assert_eq!(
            parse_cgroup(&format!("{pod}/crio-conmon-{ID}.scope\n")),
            None
        );
        // CRI-O on cgroup v2: the container's processes in a `container` sub-cgroup.
        assert_eq!(
            parse_cgroup(&format!("{pod}/crio-{ID}.scope/container\n")),
            Some((Some("12-34".into()), Some(ID.into())))
        );
    }

    #[test]
    fn shim_ids() {
        let shim = "/usr/bin/containerd-shim-runc-v2\0-namespace\0k8s.io\0-id\0abc\0-address\0/run/containerd/containerd.sock\0";
        assert_eq!(parse_shim_id(shim), Some("abc".into()));
        assert_eq!(parse_shim_id("/bin/sh\0-id\0abc\0"), None);
        assert_eq!(parse_shim_id("containerd-shim-runc-v2\0-id\0"), None);
        assert_eq!(parse_shim_id(""), None);
    }
}
