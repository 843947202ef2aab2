//! Two plain containerd units (Docker's containerd.io `containerd.service` and
//! a `cri-containerd.service` whose ExecStart names its own config and socket):
//! the one that serves the kubelet is the one its runtime endpoint names, else
//! the only one whose config leaves the CRI plugin on. Found from the unit
//! files and configs under the root; decided by `choose`, which reads nothing.

use std::path::{Path, PathBuf};

use crate::host::snapshot::Snapshot;
use crate::host::units::{UNIT_DIRS, UnitFile, config_arg};

/// containerd's socket without `--address` or `[grpc] address`.
pub const DEFAULT_SOCKET: &str = "/run/containerd/containerd.sock";
/// Unit files looked at per directory, and containerd units kept: bounds on
/// what an odd tree can make the agent read.
const MAX_FILES_PER_DIR: usize = 2048;
const MAX_UNITS: usize = 8;

/// The `*.service` units (besides `known`) whose ExecStart runs a binary named
/// `containerd`, as systemd would load them.
pub(super) fn containerd_units(snap: &Snapshot, known: &[&str]) -> Vec<UnitFile> {
    let mut names: Vec<String> = Vec::new();
    for d in UNIT_DIRS {
        let Ok(files) = snap.list_dir(Path::new(d)) else {
            continue;
        };
        for f in files.into_iter().take(MAX_FILES_PER_DIR) {
            if !f.ends_with(".service") || f.contains('@') || known.contains(&f.as_str()) {
                continue;
            }
            // Only a file that mentions containerd is parsed with its drop-ins
            // (a unit directory holds hundreds of units).
            let text = snap.read_string(&Path::new(d).join(&f)).ok().flatten();
            if text.is_some_and(|t| t.contains("containerd")) {
                names.push(f);
            }
        }
    }
    names.sort();
    names.dedup();
    names
        .iter()
        .filter_map(|n| snap.unit_file(n).ok().flatten())
        .filter(|u| {
            u.command()
                .and_then(|c| c.first().cloned())
                .is_some_and(|b| Path::new(&b).file_name() == Some("containerd".as_ref()))
        })
        .take(MAX_UNITS)
        .collect()
}

/// The value of `--address`/`-a` in containerd's arguments.
fn address_arg(args: &[String]) -> Option<String> {
    let mut it = args.iter();
    while let Some(a) = it.next() {
        for flag in ["--address", "-address", "-a", "--a"] {
            if a == flag {
                return it.next().cloned();
            }
            if let Some(v) = a.strip_prefix(flag).and_then(|r| r.strip_prefix('=')) {
                return Some(v.to_owned());
            }
        }
    }
    None
}

/// What the choice needs to know of one unit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub unit: String,
    /// Where it listens: `--address` (which wins over the config), else the
    /// config's `[grpc] address`, else containerd's default.
    pub socket: PathBuf,
    /// The `disabled_plugins` entry that turns CRI off, if any.
    pub cri_disabled: Option<String>,
}

/// The unit's `--address`, when its ExecStart passes one.
pub fn unit_address(unit: &UnitFile) -> Option<PathBuf> {
    unit.command()
        .as_deref()
        .and_then(address_arg)
        .map(PathBuf::from)
}

/// Reads what `choose` needs of a unit: its socket and its config's plugins.
pub(super) fn candidate(snap: &Snapshot, unit: &str, file: Option<&UnitFile>) -> Candidate {
    let cmd = file.and_then(UnitFile::command).unwrap_or_default();
    let config = config_arg(&cmd).unwrap_or_else(|| super::DEFAULT_CONFIG.to_owned());
    let doc: Option<toml::Table> = snap
        .read_string(Path::new(&config))
        .ok()
        .flatten()
        .and_then(|t| t.parse().ok());
    let grpc = doc
        .as_ref()
        .and_then(|d| d.get("grpc")?.get("address")?.as_str().map(str::to_owned));
    // The short id `cri` only names the CRI plugin in a version 1 file.
    let cri_disabled = doc.as_ref().and_then(|d| {
        let v1 = d
            .get("version")
            .and_then(toml::Value::as_integer)
            .unwrap_or(1)
            == 1;
        d.get("disabled_plugins")?
            .as_array()?
            .iter()
            .filter_map(|v| v.as_str())
            .find(|p| CRI_IDS.contains(p) && (*p != "cri" || v1))
            .map(str::to_owned)
    });
    Candidate {
        unit: unit.to_owned(),
        socket: PathBuf::from(
            address_arg(&cmd)
                .or(grpc)
                .unwrap_or_else(|| DEFAULT_SOCKET.to_owned()),
        ),
        cri_disabled,
    }
}

/// The plugin ids that turn CRI off in `disabled_plugins` (1.x's short and
/// full ids, 2.x's runtime plugin).
const CRI_IDS: &[&str] = &[
    "cri",
    "io.containerd.grpc.v1.cri",
    "io.containerd.cri.v1.runtime",
];

/// Which of several plain containerd units serves the kubelet: the one whose
/// socket is the kubelet's runtime endpoint; else, without a readable
/// endpoint, the only one whose config leaves CRI on. `Err` says, per unit,
/// why none could be told.
pub fn choose(cands: &[Candidate], endpoint: Option<&str>) -> Result<String, String> {
    if let Some(ep) = endpoint {
        let path = ep.strip_prefix("unix://").unwrap_or(ep);
        let hits: Vec<&Candidate> = cands
            .iter()
            .filter(|c| same_socket(&c.socket, Path::new(path)))
            .collect();
        if let [one] = hits.as_slice() {
            return Ok(one.unit.clone());
        }
        return Err(format!(
            "the kubelet's runtime endpoint is {ep}, and {} of them listen there ({})",
            if hits.is_empty() { "none" } else { "several" },
            cands
                .iter()
                .map(|c| format!("{} on {}", c.unit, c.socket.display()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    let serving: Vec<&Candidate> = cands.iter().filter(|c| c.cri_disabled.is_none()).collect();
    if let [one] = serving.as_slice() {
        return Ok(one.unit.clone());
    }
    Err(format!(
        "the kubelet's runtime endpoint could not be read (/var/lib/kubelet/config.yaml, kubeadm-flags.env), and {} ({})",
        if serving.is_empty() {
            "all of them disable CRI"
        } else {
            "more than one leaves CRI on"
        },
        cands
            .iter()
            .map(|c| match &c.cri_disabled {
                Some(p) => format!("{} disables {p:?}", c.unit),
                None => format!("{} serves CRI on {}", c.unit, c.socket.display()),
            })
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// One plain unit is active, others are installed: the kubelet's endpoint,
/// when it names another of them, wins (the one active may be Docker's while
/// the kubelet's is down; its config is the one to prepare).
pub fn prefer_kubelets(active: String, cands: &[Candidate], endpoint: Option<&str>) -> String {
    match endpoint.map(|ep| choose(cands, Some(ep))) {
        Some(Ok(u)) => u,
        _ => active,
    }
}

/// `/var/run` is `/run` on every systemd host.
fn same_socket(a: &Path, b: &Path) -> bool {
    let norm = |p: &Path| -> PathBuf {
        p.strip_prefix("/var/run")
            .map_or_else(|_| p.to_owned(), |r| Path::new("/run").join(r))
    };
    norm(a) == norm(b)
}

/// The kubelet's CRI endpoint: `containerRuntimeEndpoint` in its config file,
/// else `--container-runtime-endpoint` in the flag files kubeadm and the
/// packages write.
pub fn kubelet_endpoint(host: &Snapshot) -> Option<String> {
    let config = host
        .read_string(Path::new("/var/lib/kubelet/config.yaml"))
        .ok()
        .flatten()
        .and_then(|t| {
            t.lines().find_map(|l| {
                let v = l.trim().strip_prefix("containerRuntimeEndpoint:")?;
                Some(v.trim().trim_matches(['"', '\'']).to_owned())
            })
        });
    config.filter(|v| !v.is_empty()).or_else(|| {
        [
            "/var/lib/kubelet/kubeadm-flags.env",
            "/etc/default/kubelet",
            "/etc/sysconfig/kubelet",
        ]
        .iter()
        .filter_map(|p| host.read_string(Path::new(p)).ok().flatten())
        .find_map(|t| {
            let i = t.find("--container-runtime-endpoint")?;
            let rest = t[i + "--container-runtime-endpoint".len()..].trim_start_matches(['=', ' ']);
            let v: String = rest
                .chars()
                .take_while(|c| !c.is_whitespace() && *c != '"' && *c != '\'')
                .collect();
            (!v.is_empty()).then_some(v)
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(unit: &str, socket: &str, off: Option<&str>) -> Candidate {
        Candidate {
            unit: unit.into(),
            socket: socket.into(),
            cri_disabled: off.map(str::to_owned),
        }
    }

    fn docker_and_cri() -> Vec<Candidate> {
        vec![
            c("containerd.service", DEFAULT_SOCKET, Some("cri")),
            c(
                "cri-containerd.service",
                "/run/cri-containerd/cri-containerd.sock",
                None,
            ),
        ]
    }

    #[test]
    fn the_kubelets_endpoint_picks_the_unit_listening_there() {
        let cands = docker_and_cri();
        let ep = "unix:///var/run/cri-containerd/cri-containerd.sock";
        assert_eq!(choose(&cands, Some(ep)).unwrap(), "cri-containerd.service");
        // The endpoint wins over the plugin list: a kubelet on the default socket
        // uses that containerd, whatever its config says (the check then says
        // CRI is off there).
        let ep = "unix:///run/containerd/containerd.sock";
        assert_eq!(choose(&cands, Some(ep)).unwrap(), "containerd.service");
        let e = choose(&cands, Some("unix:///run/crio/crio.sock")).unwrap_err();
        assert!(e.contains("none of them listen there"), "{e}");
        assert!(
            e.contains("cri-containerd.service on /run/cri-containerd"),
            "{e}"
        );
    }

    #[test]
    fn without_an_endpoint_the_one_that_leaves_cri_on() {
        assert_eq!(
            choose(&docker_and_cri(), None).unwrap(),
            "cri-containerd.service"
        );
        let both_on = vec![
            c("containerd.service", DEFAULT_SOCKET, None),
            c("cri-containerd.service", "/run/x.sock", None),
        ];
        let e = choose(&both_on, None).unwrap_err();
        assert!(e.contains("more than one leaves CRI on"), "{e}");
        let both_off = vec![
            c("containerd.service", DEFAULT_SOCKET, Some("cri")),
            c(
                "b.service",
                "/run/x.sock",
                Some("io.containerd.grpc.v1.cri"),
            ),
        ];
        let e = choose(&both_off, None).unwrap_err();
        assert!(e.contains("all of them disable CRI"), "{e}");
        assert!(
            e.contains("b.service disables \"io.containerd.grpc.v1.cri\""),
            "{e}"
        );
    }

    #[test]
    fn the_kubelets_unit_wins_over_the_only_active_one() {
        let cands = docker_and_cri();
        let ep = Some("unix:///run/cri-containerd/cri-containerd.sock");
        let active = "containerd.service".to_owned();
        assert_eq!(
            prefer_kubelets(active.clone(), &cands, ep),
            "cri-containerd.service"
        );
        assert_eq!(prefer_kubelets(active.clone(), &cands, None), active);
        let elsewhere = Some("unix:///run/crio/crio.sock");
        assert_eq!(prefer_kubelets(active.clone(), &cands, elsewhere), active);
    }

    #[test]
    fn address_argument_spellings() {
        let a = |s: &str| s.split(' ').map(str::to_owned).collect::<Vec<_>>();
        assert_eq!(
            address_arg(&a("containerd --address /r/c.sock")).as_deref(),
            Some("/r/c.sock")
        );
        assert_eq!(
            address_arg(&a("containerd -a=/r/c.sock -c /x")).as_deref(),
            Some("/r/c.sock")
        );
        assert_eq!(address_arg(&a("containerd --config /x")), None);
    }
}
