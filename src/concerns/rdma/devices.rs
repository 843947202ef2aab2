//! The RDMA device and port inventory from sysfs (what `ibstat`, `ibdev2netdev`
//! and `rdma link` show), checked against the expectations in the agent config.
//!
//! `/sys/class/infiniband/<dev>` are relative links into `/sys/devices/…`; they
//! are resolved inside the root. Only the files the check needs are read (about a
//! dozen per device), so ~1000 SR-IOV VFs stay fast.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde_json::json;

use super::RdmaConfig;
use super::gpudirect::Finding;
use crate::check::{Check, Status};
use crate::host::{Host, HostError};

pub const CHECK_ID: &str = "rdma.devices";
const CLASS: &str = "/sys/class/infiniband";
/// Errors listed in the message; the rest are in `details`.
const SHOWN_ERRORS: usize = 3;

/// A sysfs file as read: absent, its text, or why it could not be read.
pub type Read = Result<Option<String>, String>;

/// What gather read for one device, before parsing.
#[derive(Debug, Clone)]
pub struct RawDevice {
    pub name: String,
    /// The PCI function (last component of the resolved `device` link).
    pub pci: Option<String>,
    /// `device/physfn` exists.
    pub is_vf: bool,
    pub node_guid: Read,
    pub fw_ver: Read,
    pub hca_type: Read,
    pub board_id: Read,
    /// `device/net/*`.
    pub netdevs: Vec<String>,
    pub ports: Vec<RawPort>,
    /// Directory-level problems (unresolvable link, unreadable ports dir).
    pub errors: Vec<String>,
}

impl RawDevice {
    pub fn new(name: String) -> Self {
        RawDevice {
            name,
            pci: None,
            is_vf: false,
            node_guid: Ok(None),
            fw_ver: Ok(None),
            hca_type: Ok(None),
            board_id: Ok(None),
            netdevs: Vec::new(),
            ports: Vec::new(),
            errors: Vec::new(),
        }
    }
}

#[derive(Debug, Clone)]
pub struct RawPort {
    /// The directory name under `ports/` (a number on a sane node).
    pub name: String,
    pub state: Read,
    pub phys_state: Read,
    pub rate: Read,
    pub link_layer: Read,
    /// `gid_attrs/ndevs/0`: the netdev of the default GID (RoCE; IB ports have none).
    pub ndev: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    /// A physical function (or a device without PCI parent).
    Pf,
    /// An SR-IOV virtual function.
    Vf,
    /// A RoCE LAG device (`mlx5_bond_*`).
    Bond,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Device {
    pub name: String,
    pub kind: Kind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pci: Option<String>,
    pub node_guid: Option<String>,
    pub fw_ver: Option<String>,
    pub hca_type: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub board_id: Option<String>,
    pub netdevs: Vec<String>,
    pub ports: Vec<Port>,
    /// Per-field problems, e.g. `mlx5_0/1 rate: cannot parse "fast"`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Port {
    pub port: u32,
    pub state: Option<String>,
    pub phys_state: Option<String>,
    pub rate_gbps: Option<f64>,
    pub link_layer: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub netdev: Option<String>,
}

impl Port {
    pub fn is_active(&self) -> bool {
        self.state.as_deref() == Some("ACTIVE")
    }
}

// ---------- gather ----------

fn read(host: &Host, p: &Path) -> Read {
    host.read_string(p).map_err(|e| e.to_string())
}

/// Every device under /sys/class/infiniband. Only a missing class directory's
/// parent being unreadable is an error; each device's problems stay with it.
pub fn gather(host: &Host) -> Result<Vec<RawDevice>, HostError> {
    let names = host.list_dir(Path::new(CLASS))?;
    // Reading sysfs is system calls, ~40 per device: an SR-IOV node with a
    // thousand VFs takes tens of milliseconds on one core, so use them all.
    let workers = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(names.len() / DEVICES_PER_WORKER)
        .max(1);
    if workers == 1 {
        return Ok(names.into_iter().map(|n| gather_device(host, n)).collect());
    }
    let chunk = names.len().div_ceil(workers);
    Ok(std::thread::scope(|s| {
        let handles: Vec<_> = names
            .chunks(chunk)
            .map(|c| {
                s.spawn(move || {
                    c.iter()
                        .map(|n| gather_device(host, n.clone()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)))
            .collect()
    }))
}

/// Below this many devices per thread, starting threads costs more than it saves.
const DEVICES_PER_WORKER: usize = 128;

fn gather_device(host: &Host, name: String) -> RawDevice {
    let mut raw = RawDevice::new(name);
    let dir = match host.resolve(&Path::new(CLASS).join(&raw.name)) {
        Ok(d) => d,
        Err(e) => {
            raw.errors.push(format!("{}: {e}", raw.name));
            return raw;
        }
    };
    if let Ok(dev) = host.resolve(&dir.join("device")) {
        if host.exists(&dev) && dev.to_string_lossy().starts_with("/sys/devices/pci") {
            raw.pci = dev.file_name().map(|n| n.to_string_lossy().into_owned());
            raw.is_vf = host.exists(&dev.join("physfn"));
            raw.netdevs = host.list_dir(&dev.join("net")).unwrap_or_default();
        }
    }
    raw.node_guid = read(host, &dir.join("node_guid"));
    raw.fw_ver = read(host, &dir.join("fw_ver"));
    raw.hca_type = read(host, &dir.join("hca_type"));
    raw.board_id = read(host, &dir.join("board_id"));
    match host.list_dir(&dir.join("ports")) {
        Ok(ports) => {
            raw.ports = ports
                .into_iter()
                .map(|p| {
                    let d: PathBuf = dir.join("ports").join(&p);
                    RawPort {
                        state: read(host, &d.join("state")),
                        phys_state: read(host, &d.join("phys_state")),
                        rate: read(host, &d.join("rate")),
                        link_layer: read(host, &d.join("link_layer")),
                        // The kernel answers EINVAL here for IB ports: no netdev, not an error.
                        ndev: host
                            .read_string(&d.join("gid_attrs/ndevs/0"))
                            .ok()
                            .flatten()
                            .map(|s| s.trim().to_owned())
                            .filter(|s| !s.is_empty()),
                        name: p,
                    }
                })
                .collect()
        }
        Err(e) => raw.errors.push(format!("{}: {e}", raw.name)),
    }
    raw
}

// ---------- parse (pure) ----------

/// `4: ACTIVE` → `ACTIVE` (also `5: LinkUp`).
pub fn parse_state(text: &str) -> Result<String, String> {
    let t = text.trim();
    let (num, name) = t
        .split_once(':')
        .ok_or_else(|| format!("cannot parse {t:?} (expected like \"4: ACTIVE\")"))?;
    let name = name.trim();
    if num.trim().parse::<u8>().is_err()
        || name.is_empty()
        || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    {
        return Err(format!("cannot parse {t:?} (expected like \"4: ACTIVE\")"));
    }
    Ok(name.to_owned())
}

/// `200 Gb/sec (4X HDR)` → 200; `2.5 Gb/sec (1X SDR)` → 2.5.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    let t = text.trim();
    t.strip_suffix(')')
        .and_then(|r| r.split_once(" Gb/sec ("))
        .or_else(|| t.split_once(" Gb/sec").filter(|(_, rest)| rest.is_empty()))
        .and_then(|(n, _)| n.trim().parse::<f64>().ok())
        .filter(|r| r.is_finite() && *r >= 0.0)
        .ok_or_else(|| format!("cannot parse {t:?} (expected like \"200 Gb/sec (4X HDR)\")"))
}

/// `0c42:a103:0065:6a3c`.
pub fn parse_guid(text: &str) -> Result<String, String> {
    let t = text.trim();
    let groups: Vec<&str> = t.split(':').collect();
    if groups.len() == 4
        && groups
            .iter()
            .all(|g| g.len() == 4 && g.chars().all(|c| c.is_ascii_hexdigit()))
    {
        Ok(t.to_owned())
    } else {
        Err(format!(
            "cannot parse {t:?} (expected like \"0c42:a103:0065:6a3c\")"
        ))
    }
}

/// Free text (firmware version, HCA type, board id, link layer): one printable line.
pub fn parse_text(text: &str) -> Result<String, String> {
    let t = text.trim();
    if t.is_empty() || t.chars().any(char::is_control) {
        Err(format!("unexpected content {t:?}"))
    } else {
        Ok(t.to_owned())
    }
}

fn field<T>(
    errors: &mut Vec<String>,
    what: &str,
    read: &Read,
    parse: impl Fn(&str) -> Result<T, String>,
    required: bool,
) -> Option<T> {
    match read {
        Ok(Some(t)) => parse(t)
            .map_err(|e| errors.push(format!("{what}: {e}")))
            .ok(),
        Ok(None) if required => {
            errors.push(format!("{what}: missing"));
            None
        }
        Ok(None) => None,
        Err(e) => {
            errors.push(format!("{what}: {e}"));
            None
        }
    }
}

pub fn parse(raw: RawDevice) -> Device {
    let mut errors = raw.errors;
    let n = &raw.name;
    let node_guid = field(
        &mut errors,
        &format!("{n} node_guid"),
        &raw.node_guid,
        parse_guid,
        true,
    );
    let fw_ver = field(
        &mut errors,
        &format!("{n} fw_ver"),
        &raw.fw_ver,
        parse_text,
        true,
    );
    let hca_type = field(
        &mut errors,
        &format!("{n} hca_type"),
        &raw.hca_type,
        parse_text,
        false,
    );
    let board_id = field(
        &mut errors,
        &format!("{n} board_id"),
        &raw.board_id,
        parse_text,
        false,
    );
    let mut ports = Vec::new();
    for p in raw.ports {
        let Ok(number) = p.name.parse::<u32>() else {
            errors.push(format!("{n}: unexpected port directory {:?}", p.name));
            continue;
        };
        let at = format!("{n}/{number}");
        ports.push(Port {
            port: number,
            state: field(
                &mut errors,
                &format!("{at} state"),
                &p.state,
                parse_state,
                true,
            ),
            phys_state: field(
                &mut errors,
                &format!("{at} phys_state"),
                &p.phys_state,
                parse_state,
                true,
            ),
            rate_gbps: field(
                &mut errors,
                &format!("{at} rate"),
                &p.rate,
                parse_rate,
                true,
            ),
            link_layer: field(
                &mut errors,
                &format!("{at} link_layer"),
                &p.link_layer,
                parse_text,
                true,
            ),
            netdev: p.ndev,
        });
    }
    ports.sort_by_key(|p| p.port);
    let kind = if raw.name.starts_with("mlx5_bond_") {
        Kind::Bond
    } else if raw.is_vf {
        Kind::Vf
    } else {
        Kind::Pf
    };
    Device {
        name: raw.name,
        kind,
        pci: raw.pci,
        node_guid,
        fw_ver,
        hca_type,
        board_id,
        netdevs: raw.netdevs,
        ports,
        errors,
    }
}

// ---------- check (pure) ----------

fn rate(r: f64) -> String {
    format!("{r} Gb/s")
}

/// Failures of the configured expectations, each naming `device/port`.
pub fn unmet(devices: &[Device], cfg: &RdmaConfig) -> Vec<String> {
    let mut out = Vec::new();
    for e in &cfg.expect_port {
        let pattern = glob::Pattern::new(&e.device).ok();
        let matched: Vec<&Device> = devices
            .iter()
            .filter(|d| match &pattern {
                Some(p) => p.matches(&d.name),
                None => d.name == e.device,
            })
            .collect();
        if matched.is_empty() {
            out.push(format!("no RDMA device matches {:?}", e.device));
        }
        for d in matched {
            let ports: Vec<&Port> = d
                .ports
                .iter()
                .filter(|p| e.port.is_none_or(|n| p.port == n))
                .collect();
            if ports.is_empty() {
                out.push(match e.port {
                    Some(n) => format!("{} has no port {n}", d.name),
                    None => format!("{} has no ports", d.name),
                });
            }
            for p in ports {
                let at = format!("{}/{}", d.name, p.port);
                if !p.is_active() {
                    out.push(format!(
                        "{at} is {} ({}), expected ACTIVE",
                        p.state.as_deref().unwrap_or("unreadable"),
                        p.phys_state.as_deref().unwrap_or("?")
                    ));
                    continue;
                }
                if let Some(min) = e.min_rate_gbps {
                    match p.rate_gbps {
                        Some(r) if r >= f64::from(min) => {}
                        Some(r) => out.push(format!(
                            "{at} runs at {}, expected at least {min} Gb/s",
                            rate(r)
                        )),
                        None => out.push(format!(
                            "{at} rate unreadable, expected at least {min} Gb/s"
                        )),
                    }
                }
            }
        }
    }
    let active = active_by_link_layer(devices);
    for (layer, min) in &cfg.min_active_ports {
        let have = active.get(layer.as_str()).copied().unwrap_or(0);
        if have < *min {
            out.push(format!(
                "{have} ACTIVE {layer} port(s), expected at least {min}"
            ));
        }
    }
    out
}

fn active_by_link_layer(devices: &[Device]) -> BTreeMap<&str, u32> {
    let mut m = BTreeMap::new();
    for p in devices
        .iter()
        .flat_map(|d| &d.ports)
        .filter(|p| p.is_active())
    {
        *m.entry(p.link_layer.as_deref().unwrap_or("unknown"))
            .or_default() += 1;
    }
    m
}

pub fn check(devices: &[Device], cfg: &RdmaConfig, gpu: &Finding) -> Check {
    let mut failures = unmet(devices, cfg);
    failures.extend(gpu.missing.iter().map(|m| {
        format!(
            "GPUDirect module {m} is not loaded ({} NVIDIA GPU(s) present; required by rdma.gpudirect_required)",
            gpu.gpus
        )
    }));
    let errors: Vec<&String> = devices.iter().flat_map(|d| &d.errors).collect();
    let ports: usize = devices.iter().map(|d| d.ports.len()).sum();
    let active = active_by_link_layer(devices);
    let vfs = devices.iter().filter(|d| d.kind == Kind::Vf).count();
    let details = json!({
        "devices": devices,
        "active_ports": active,
        "gpudirect": gpu,
        "errors": errors,
    });
    let mut summary = format!(
        "{} RDMA device(s){}, {}/{ports} port(s) ACTIVE",
        devices.len(),
        if vfs > 0 {
            format!(" ({vfs} VFs)")
        } else {
            String::new()
        },
        active.values().sum::<u32>(),
    );
    if let Some(g) = gpu.summary() {
        summary.push_str(&format!("; {g}"));
    }
    let (status, message) = if !failures.is_empty() {
        (Status::Fail, failures.join("; "))
    } else if !errors.is_empty() {
        let shown: Vec<&str> = errors
            .iter()
            .take(SHOWN_ERRORS)
            .map(|s| s.as_str())
            .collect();
        let more = errors.len().saturating_sub(SHOWN_ERRORS);
        (
            Status::Warn,
            format!(
                "{summary}; unreadable sysfs: {}{}",
                shown.join("; "),
                if more > 0 {
                    format!(" (and {more} more)")
                } else {
                    String::new()
                }
            ),
        )
    } else {
        (Status::Ok, summary)
    };
    Check::new(CHECK_ID, status, message).with_details(details)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdma::ExpectPort;

    fn t(s: &str) -> Read {
        Ok(Some(format!("{s}\n")))
    }

    fn port(name: &str, state: &str, rate: &str, layer: &str) -> RawPort {
        RawPort {
            name: name.into(),
            state: t(state),
            phys_state: t(if state.contains("ACTIVE") {
                "5: LinkUp"
            } else {
                "3: Disabled"
            }),
            rate: t(rate),
            link_layer: t(layer),
            ndev: None,
        }
    }

    fn raw(name: &str, ports: Vec<RawPort>) -> RawDevice {
        RawDevice {
            node_guid: t("0c42:a103:0065:6a3c"),
            fw_ver: t("20.31.1014"),
            hca_type: t("MT4123"),
            ports,
            ..RawDevice::new(name.into())
        }
    }

    #[test]
    fn parsers() {
        assert_eq!(parse_state("4: ACTIVE\n").unwrap(), "ACTIVE");
        assert_eq!(parse_state("5: LinkUp").unwrap(), "LinkUp");
        assert!(parse_state("ACTIVE").is_err());
        assert!(parse_state("x: ACTIVE").is_err());
        assert!(parse_state("4: \u{1}").is_err());
        assert_eq!(parse_rate("200 Gb/sec (4X HDR)\n").unwrap(), 200.0);
        assert_eq!(parse_rate("2.5 Gb/sec (1X SDR)").unwrap(), 2.5);
        assert_eq!(parse_rate("100 Gb/sec").unwrap(), 100.0);
        assert!(parse_rate("fast").is_err());
        assert!(parse_rate("NaN Gb/sec (4X HDR)").is_err());
        assert!(parse_rate("-1 Gb/sec (4X HDR)").is_err());
        assert_eq!(
            parse_guid("0c42:a103:0065:6a3c\n").unwrap(),
            "0c42:a103:0065:6a3c"
        );
        assert!(parse_guid("0c42:a103:0065").is_err());
        assert!(parse_guid("zzzz:a103:0065:6a3c").is_err());
        assert!(parse_text("").is_err());
        assert!(parse_text("a\u{7}b").is_err());
    }

    #[test]
    fn garbage_becomes_field_errors() {
        let mut r = raw(
            "mlx5_0",
            vec![
                port("1", "banana", "fast", "InfiniBand"),
                port("x", "4: ACTIVE", "1 Gb/sec", "Ethernet"),
            ],
        );
        r.node_guid = Err("/sys/…/node_guid is not valid UTF-8".into());
        r.fw_ver = Ok(None);
        let d = parse(r);
        assert_eq!(d.ports.len(), 1);
        assert_eq!(d.ports[0].state, None);
        let all = d.errors.join("\n");
        for want in [
            "mlx5_0 node_guid: /sys/…/node_guid is not valid UTF-8",
            "mlx5_0 fw_ver: missing",
            "mlx5_0/1 state: cannot parse \"banana\"",
            "mlx5_0/1 rate: cannot parse \"fast\"",
            "mlx5_0: unexpected port directory \"x\"",
        ] {
            assert!(all.contains(want), "{want} not in:\n{all}");
        }
        let c = check(&[d], &RdmaConfig::default(), &Finding::default());
        assert_eq!(c.status, Status::Warn, "{}", c.message);
        assert!(c.message.contains("(and 2 more)"), "{}", c.message);
    }

    fn a100() -> Vec<Device> {
        vec![
            parse(raw(
                "mlx5_0",
                vec![port("1", "1: DOWN", "200 Gb/sec (4X HDR)", "InfiniBand")],
            )),
            parse(raw(
                "mlx5_1",
                vec![port("1", "4: ACTIVE", "200 Gb/sec (4X HDR)", "InfiniBand")],
            )),
            parse(raw(
                "mlx5_bond_0",
                vec![port("1", "4: ACTIVE", "100 Gb/sec (4X EDR)", "Ethernet")],
            )),
        ]
    }

    #[test]
    fn no_expectations_never_fail() {
        let c = check(&a100(), &RdmaConfig::default(), &Finding::default());
        assert_eq!(c.status, Status::Ok);
        assert_eq!(c.message, "3 RDMA device(s), 2/3 port(s) ACTIVE");
        assert_eq!(c.details["devices"][2]["kind"], "bond");
        assert_eq!(c.details["active_ports"]["Ethernet"], 1);
    }

    #[test]
    fn expectations_name_the_port() {
        let expect = |device: &str, port, min| ExpectPort {
            device: device.into(),
            port,
            min_rate_gbps: min,
        };
        let cfg = RdmaConfig {
            expect_port: vec![
                expect("mlx5_[01]", Some(1), None),
                expect("mlx5_bond_*", None, Some(200)),
                expect("mlx5_7", None, None),
                expect("mlx5_1", Some(2), None),
            ],
            min_active_ports: [("InfiniBand".to_owned(), 2)].into(),
            ..RdmaConfig::default()
        };
        let c = check(&a100(), &cfg, &Finding::default());
        assert_eq!(c.status, Status::Fail);
        assert_eq!(
            c.message,
            "mlx5_0/1 is DOWN (Disabled), expected ACTIVE; \
             mlx5_bond_0/1 runs at 100 Gb/s, expected at least 200 Gb/s; \
             no RDMA device matches \"mlx5_7\"; mlx5_1 has no port 2; \
             1 ACTIVE InfiniBand port(s), expected at least 2"
        );
    }
}
