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
pub fn parse_cgroup(text: &str) -> Option<(Option<String>, Option<String>)> {
    let path = text
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find(|p| p.contains("kubepods"))?;
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

#[cfg(test)]
mod tests {
    use super::*;

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
