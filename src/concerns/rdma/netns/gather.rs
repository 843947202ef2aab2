//! rdma.netns: the facts, from sysfs, /proc, /run/netns, modprobe.d and the initramfs.

use super::initramfs::initramfs;
use super::*;

pub fn gather(host: &Snapshot, cfg: &RdmaConfig) -> Result<Facts, HostError> {
    let live = match host.read_string(Path::new(PARAM)) {
        Ok(Some(t)) => parse_param(&t).map_or_else(Live::Unreadable, Live::Mode),
        Ok(None) => Live::NotLoaded,
        Err(e) => Live::Unreadable(e.to_string()),
    };
    let managed = cfg.netns_mode.wanted().is_some();
    let osrelease = host
        .read_string(Path::new("/proc/sys/kernel/osrelease"))?
        .map(|s| s.trim().to_owned());
    let (initramfs, initramfs_error) = match (&osrelease, managed) {
        (Some(r), true) => match initramfs(host, r, &cfg.modprobe_file) {
            Ok(i) => (i, None),
            Err(e) => (None, Some(e)),
        },
        _ => (None, None),
    };
    Ok(Facts {
        namespaces: if managed {
            namespaces(host)?
        } else {
            Vec::new()
        },
        plugin_sockets: if managed {
            plugin_sockets(host, &cfg.shared_plugin_sockets)?
        } else {
            Vec::new()
        },
        ofed_info: host.read_string(Path::new(OFED_INFO)).ok().flatten(),
        modprobe: host.read(&cfg.modprobe_file)?.map(|d| d.bytes),
        cmdline: host.read_string(Path::new("/proc/cmdline"))?,
        initramfs,
        initramfs_error,
        osrelease,
        live,
    })
}

/// Distinct `/proc/*/ns/net` other than PID 1's, with their holders, then `/run/netns/*`.
pub fn namespaces(host: &Snapshot) -> Result<Vec<Namespace>, HostError> {
    let link = |pid: u32| {
        host.read_link(&procfs::proc_file(pid, "ns/net"))
            .ok()
            .flatten()
            .map(|t| t.to_string_lossy().into_owned())
    };
    let initial = link(1);
    let mut by_ns: BTreeMap<String, Vec<Holder>> = BTreeMap::new();
    for pid in procfs::pids(host)? {
        let Some(ns) = link(pid) else { continue };
        if Some(&ns) == initial.as_ref() {
            continue;
        }
        let holders = by_ns.entry(ns).or_default();
        if holders.len() < HOLDERS_SHOWN {
            holders.push(Holder {
                pid,
                comm: procfs::comm(host, pid).unwrap_or_else(|| "?".into()),
                unit: procfs::read(host, pid, "cgroup").and_then(|c| cgroup_leaf(&c)),
            });
        }
    }
    // A namespace bind-mounted outside /run/netns (Docker's /run/docker/netns,
    // `unshare --net=FILE`) lives on with no process in it: PID 1's mount table
    // names it. One a process already holds is named by that process.
    let mounts = host
        .read_string(Path::new("/proc/1/mountinfo"))
        .ok()
        .flatten()
        .map(|m| nsfs_net_mounts(&m))
        .unwrap_or_default();
    let mut out: Vec<Namespace> = by_ns
        .iter()
        .map(|(id, holders)| Namespace {
            id: id.clone(),
            holders: holders.clone(),
        })
        .collect();
    out.extend(
        host.list_dir(Path::new(NAMED_NETNS))?
            .into_iter()
            .map(|n| Namespace {
                id: format!("{NAMED_NETNS}/{n}"),
                holders: Vec::new(),
            }),
    );
    out.extend(
        mounts
            .into_iter()
            .filter(|(point, ns)| {
                !Path::new(point).starts_with(NAMED_NETNS)
                    && !Path::new(point).starts_with("/var/run/netns")
                    && !by_ns.contains_key(ns)
            })
            .map(|(point, _)| Namespace {
                id: point,
                holders: Vec::new(),
            }),
    );
    Ok(out)
}

fn plugin_sockets(host: &ReadHost, patterns: &[String]) -> Result<Vec<PathBuf>, HostError> {
    let patterns: Vec<glob::Pattern> = patterns
        .iter()
        .filter_map(|p| glob::Pattern::new(p).ok())
        .collect();
    let mut out = Vec::new();
    for dir in PLUGIN_DIRS {
        for name in host.list_dir(Path::new(dir))? {
            if patterns.iter().any(|p| p.matches(&name)) {
                out.push(Path::new(dir).join(name));
            }
        }
    }
    Ok(out)
}
