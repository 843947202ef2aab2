//! The agent's privileged helper for PCI configuration space, and how the
//! daemon asks it.
//!
//! The kernel gives a reader without CAP_SYS_ADMIN only the first 64 bytes of
//! `/sys/bus/pci/devices/<bdf>/config` and refuses it writes
//! (drivers/pci/pci-sysfs.c); ACS is an extended capability (from 0x100). The
//! daemon's unit grants no CAP_SYS_ADMIN (it would be most of root) and mounts
//! /sys read-only (`ProtectKernelTunables=yes`). So the two operations that
//! need it run as `rdma-node-agent pci-config …`, a transient unit systemd
//! starts for the daemon (as the chown and the initramfs rebuild are), with
//! only CAP_SYS_ADMIN and only `/run/rdma-node-agent` writable:
//!
//! - `read --token T BDF…`: the whole config space of at most 64 PCI bridges
//!   (header type 1: nothing else is read), into `/run/rdma-node-agent/pci-config/T.json`.
//! - `write-acs --token T BDF …`: one ACSCtl write, after checking the function
//!   is still the one the check read and ACSCtl still holds what it read.
//!
//! Every argument is checked by the helper itself (a BDF is `dddd:bb:dd.f` and
//! nothing else, under /sys/bus/pci/devices only); its answer is a root-only file.

use std::collections::BTreeMap;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Host;
use super::helper_error::HelperError;
use super::pci_config::{self, AcsRequest, AcsWrite};
use super::service::{PrivilegedHelper, ServiceManager};
use super::snapshot::Snapshot;
use super::stop::Stop;

/// Where the helper leaves its answers (in the daemon's runtime directory).
pub const OUT_DIR: &str = "/run/rdma-node-agent/pci-config";
/// The transient units' names start with this (one per run: a `check` from a
/// shell and the daemon may ask at the same time).
pub const UNIT_PREFIX: &str = "rdma-node-agent-pci-config";
/// Bridges per read: a GPU↔NIC path crosses a handful; an 8-GPU HGX board ~40.
pub const MAX_FUNCTIONS: usize = 64;
const TIMEOUT: Duration = Duration::from_secs(30);
/// The header type of a PCI-to-PCI bridge (`PCI_HEADER_TYPE_BRIDGE`).
const HEADER_TYPE_BRIDGE: u8 = 1;

/// `rdma-node-agent pci-config …` (hidden: systemd runs it for the daemon).
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub op: Op,
}

#[derive(clap::Subcommand, Debug)]
pub enum Op {
    /// Read the whole config space of PCI bridges into /run/rdma-node-agent/pci-config/TOKEN.json.
    Read {
        #[arg(long)]
        token: String,
        #[arg(required = true)]
        bdfs: Vec<String>,
    },
    /// Write a bridge's ACS control register once its identity and value are re-checked.
    WriteAcs {
        #[arg(long)]
        token: String,
        bdf: String,
        #[arg(long)]
        vendor: String,
        #[arg(long)]
        device: String,
        #[arg(long)]
        class: String,
        /// The PCI Express port type, or `none`.
        #[arg(long)]
        port_type: String,
        #[arg(long)]
        offset: String,
        #[arg(long)]
        expect: String,
        #[arg(long)]
        value: String,
    },
}

/// Each bridge's whole config space, or why the helper could not read it.
pub type Configs = BTreeMap<String, Result<Vec<u8>, String>>;

/// The helper's answer to `read`: per function, its config space in hex or why not.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReadAnswer {
    pub functions: BTreeMap<String, Result<String, String>>,
}

/// The helper's answer to `write-acs`.
#[derive(Debug, Serialize, Deserialize)]
pub struct WriteAnswer {
    pub result: Result<AcsWrite, String>,
}

/// An answer's name: a helper run's token (hex, at most 32 digits).
pub(super) fn is_token(t: &str) -> bool {
    (1..=32).contains(&t.len())
        && t.bytes()
            .all(|c| c.is_ascii_digit() || (b'a'..=b'f').contains(&c))
}

fn out_path(token: &str) -> PathBuf {
    answer_path(OUT_DIR, token)
}

/// Where a helper run leaves its answer: `DIR/TOKEN.json`.
pub(super) fn answer_path(dir: &str, token: &str) -> PathBuf {
    Path::new(dir).join(format!("{token}.json"))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 || s.len() > 2 * 4096 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

fn number(what: &str, s: &str, max: u32) -> Result<u32, String> {
    let t = s.strip_prefix("0x").unwrap_or(s);
    u32::from_str_radix(t, 16)
        .ok()
        .filter(|v| *v <= max)
        .ok_or_else(|| format!("--{what} {s:?}: not a hex number up to {max:#x}"))
}

/// One bridge's config space, refused for anything that is not a bridge.
fn read_bridge(sys: &Host, bdf: &str) -> Result<Vec<u8>, String> {
    if !pci_config::is_bdf(bdf) {
        return Err(format!(
            "{bdf:?} is not a PCI address (dddd:bb:dd.f, lower-case hex)"
        ));
    }
    let bytes = sys.pci_config_of(bdf).map_err(|e| e.to_string())?;
    match bytes.get(0x0e).map(|t| t & 0x7f) {
        Some(HEADER_TYPE_BRIDGE) => Ok(bytes),
        Some(t) => Err(format!(
            "{bdf}: not a PCI bridge (header type {t:#04x}): the helper reads bridges only"
        )),
        None => Err(format!("{bdf}: only {} bytes readable", bytes.len())),
    }
}

fn write_request(
    bdf: &str,
    [vendor, device, class, port_type, offset, expect, value]: [&str; 7],
) -> Result<AcsRequest, String> {
    if !pci_config::is_bdf(bdf) {
        return Err(format!(
            "{bdf:?} is not a PCI address (dddd:bb:dd.f, lower-case hex)"
        ));
    }
    let port_type = match port_type {
        "none" => None,
        p => Some(number("port-type", p, 0xf)? as u8),
    };
    Ok(AcsRequest {
        bdf: bdf.to_owned(),
        identity: pci_config::PciIdentity {
            vendor: number("vendor", vendor, 0xffff)? as u16,
            device: number("device", device, 0xffff)? as u16,
            class: number("class", class, 0xff_ffff)?,
            port_type,
        },
        offset: number("offset", offset, 0xffc)? as u16,
        expect: number("expect", expect, 0xffff)? as u16,
        value: number("value", value, 0xffff)? as u16,
    })
}

/// Runs the helper: PCI functions under `sys`'s root, its answer under
/// `out`'s (both `/` but in tests). `Err` (and exit status 1) when it could
/// not do all it was asked; the answer file says the rest.
pub fn execute(sys: &Host, out: &Host, args: &Args) -> Result<(), String> {
    let (token, answer, ok) = match &args.op {
        Op::Read { token, bdfs } => {
            if !is_token(token) {
                return Err(format!("--token {token:?}: 1 to 32 lower-case hex digits"));
            }
            if bdfs.len() > MAX_FUNCTIONS {
                return Err(format!(
                    "{} functions asked, at most {MAX_FUNCTIONS}",
                    bdfs.len()
                ));
            }
            let mut a = ReadAnswer::default();
            for bdf in bdfs {
                a.functions
                    .insert(bdf.clone(), read_bridge(sys, bdf).map(|b| hex(&b)));
            }
            let ok = a.functions.values().all(Result::is_ok);
            (token, serde_json::to_vec(&a), ok)
        }
        Op::WriteAcs {
            token,
            bdf,
            vendor,
            device,
            class,
            port_type,
            offset,
            expect,
            value,
        } => {
            if !is_token(token) {
                return Err(format!("--token {token:?}: 1 to 32 lower-case hex digits"));
            }
            let words = [vendor, device, class, port_type, offset, expect, value];
            let result = write_request(bdf, words.map(String::as_str))
                .and_then(|r| sys.write_acs_checked(&r).map_err(|e| e.to_string()));
            if let Err(e) = &result {
                eprintln!("rdma-node-agent pci-config: {e}");
            }
            let ok = result.is_ok();
            (token, serde_json::to_vec(&WriteAnswer { result }), ok)
        }
    };
    let bytes = answer.map_err(|e| e.to_string())?;
    out.state_write(&out_path(token), &bytes, 0o600)
        .map_err(|e| e.to_string())?;
    if ok {
        Ok(())
    } else {
        Err("not every function could be read or written: see the answer".into())
    }
}

/// `rdma-node-agent [--root DIR] pci-config …`: exit 0 when all was done,
/// 1 otherwise (what went wrong on stderr, which systemd keeps in the journal).
pub fn main(root: &Path, args: &Args) -> std::process::ExitCode {
    let host = Host::new(root);
    match execute(&host, &host, args) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rdma-node-agent pci-config: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

/// The argument words of a helper run (after the program).
fn words(op: &str, token: &str, rest: Vec<String>) -> Vec<String> {
    let mut w = vec!["pci-config".to_owned(), op.to_owned(), "--token".into()];
    w.push(token.to_owned());
    w.extend(rest);
    w
}

/// This program, for systemd to start (an upgraded package leaves the running
/// daemon's file "(deleted)": the new one at the same path is the helper).
pub(super) fn own_exe() -> Result<PathBuf, HelperError> {
    let p = std::env::current_exe().map_err(HelperError::OwnExe)?;
    let s = p.to_string_lossy();
    Ok(PathBuf::from(s.strip_suffix(" (deleted)").unwrap_or(&s)))
}

/// A random enough name for one run's answer.
pub(super) fn token() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    format!("{:x}{:x}", std::process::id(), nanos & 0xffff_ffff_ffff)
}

/// The daemon's side: runs the helper as a transient unit through systemd
/// and reads its answer.
pub struct Helper<'a> {
    pub manager: &'a dyn ServiceManager,
    /// Where the answer is read (the live host).
    pub host: &'a Host,
    pub exe: PathBuf,
}

impl<'a> Helper<'a> {
    pub fn new(manager: &'a dyn ServiceManager, host: &'a Host) -> Result<Self, HelperError> {
        Ok(Helper {
            manager,
            host,
            exe: own_exe()?,
        })
    }

    fn run(&self, op: &str, rest: Vec<String>) -> Result<Vec<u8>, HelperError> {
        let token = token();
        let unit = format!("{UNIT_PREFIX}-{token}.service");
        let mut argv = vec![self.exe.display().to_string()];
        argv.extend(words(op, &token, rest));
        // Its answer's directory, root's alone, must exist for the sandbox.
        let dir = self.host.path(Path::new(OUT_DIR));
        if let Err(source) = std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(&dir)
        {
            return Err(HelperError::AnswerDir { dir, source });
        }
        let ran = self.manager.run_privileged_helper(
            PrivilegedHelper::PciConfig,
            &unit,
            &argv,
            TIMEOUT,
            &Stop::new(),
        );
        let path = out_path(&token);
        let answer = self.host.state_read(&path);
        let _ = self.host.state_remove(&path);
        match (answer, ran) {
            (Ok(Some(b)), _) => Ok(b),
            (Ok(None), Err(source)) => Err(HelperError::Unit { unit, source }),
            (Ok(None), Ok(())) => Err(HelperError::NoAnswer { unit }),
            (Err(e), _) => Err(HelperError::Unreadable(e)),
        }
    }

    /// The whole config space of each bridge, or why not.
    pub fn read(&self, bdfs: &[String]) -> Result<Configs, HelperError> {
        let bytes = self.run("read", bdfs.to_vec())?;
        let a: ReadAnswer = serde_json::from_slice(&bytes).map_err(HelperError::Garbled)?;
        Ok(bdfs
            .iter()
            .map(|b| {
                let got = match a.functions.get(b) {
                    Some(Ok(h)) => unhex(h).ok_or_else(|| "a garbled answer".to_owned()),
                    Some(Err(e)) => Err(e.clone()),
                    None => Err("not in the helper's answer".to_owned()),
                };
                (b.clone(), got)
            })
            .collect())
    }

    /// One identity-checked ACSCtl write.
    pub fn write_acs(&self, r: &AcsRequest) -> Result<AcsWrite, HelperError> {
        let i = &r.identity;
        let rest = vec![
            r.bdf.clone(),
            format!("--vendor={:#06x}", i.vendor),
            format!("--device={:#06x}", i.device),
            format!("--class={:#08x}", i.class),
            format!(
                "--port-type={}",
                i.port_type.map_or("none".into(), |t| t.to_string())
            ),
            format!("--offset={:#05x}", r.offset),
            format!("--expect={:#06x}", r.expect),
            format!("--value={:#06x}", r.value),
        ];
        let bytes = self.run("write-acs", rest)?;
        let a: WriteAnswer = serde_json::from_slice(&bytes).map_err(HelperError::Garbled)?;
        a.result.map_err(HelperError::Refused)
    }
}

impl Snapshot {
    /// The whole config space of the bridges `bdfs`, read by the privileged
    /// helper: `None` without systemd to run it (a `--root` tree, a host whose
    /// PID 1 is not systemd: there the agent reads what it may itself).
    pub fn pci_config_privileged(&self, bdfs: &[String]) -> Option<Result<Configs, HelperError>> {
        let manager = self.privileged_runner()?;
        let host = std::ops::Deref::deref(self).host();
        Some(Helper::new(manager, host).and_then(|h| h.read(bdfs)))
    }
}

/// Whether this process may read and write config space itself
/// (CAP_SYS_ADMIN in its effective set, `CapEff` in /proc/self/status).
pub fn has_cap_sys_admin() -> bool {
    const CAP_SYS_ADMIN: u32 = 21;
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:"))
                .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        })
        .is_some_and(|caps| caps & (1 << CAP_SYS_ADMIN) != 0)
}

/// `execute` from a helper run's words (`pci-config read --token …`): what a
/// test's service manager does in place of systemd.
pub fn execute_words(sys: &Host, out: &Host, argv: &[String]) -> Result<(), String> {
    #[derive(clap::Parser)]
    struct Words {
        #[command(subcommand)]
        op: Op,
    }
    use clap::Parser;
    let rest = argv
        .iter()
        .skip_while(|w| *w != "pci-config")
        .skip(1)
        .cloned();
    let w = Words::try_parse_from(std::iter::once("pci-config".to_owned()).chain(rest))
        .map_err(|e| e.to_string())?;
    execute(sys, out, &Args { op: w.op })
}

/// systemd for unit tests: runs the helpers (pci-config, kernel-log) in this
/// process, on trees.
#[cfg(test)]
pub mod testing {
    use std::sync::Mutex;
    use std::time::Duration;

    use super::super::Host;
    use super::super::service::{
        PrivilegedHelper, ServiceManager, SystemdError, UnitReader, UnitStatus,
    };
    use super::super::stop::Stop;

    /// The helper reads and writes PCI functions under `sys` (what a root
    /// process sees) and leaves its answer under `out` (the agent's root).
    pub struct InProcess {
        pub sys: Host,
        pub out: Host,
        pub runs: Mutex<Vec<String>>,
    }

    impl InProcess {
        pub fn new(sys: &std::path::Path, out: &std::path::Path) -> Self {
            InProcess {
                sys: Host::new(sys),
                out: Host::new(out),
                runs: Mutex::default(),
            }
        }

        pub fn runs(&self) -> Vec<String> {
            self.runs.lock().unwrap().clone()
        }
    }

    /// A helper's `execute_words`: what the helper binary does with its argv.
    type RunWords = fn(&Host, &Host, &[String]) -> Result<(), String>;

    impl UnitReader for InProcess {
        fn status(&self, unit: &str) -> Result<UnitStatus, SystemdError> {
            Err(SystemdError::Call {
                call: format!("status of {unit}"),
                message: "not in this test".into(),
            })
        }
    }

    impl ServiceManager for InProcess {
        fn reload(&self) -> Result<(), SystemdError> {
            Ok(())
        }
        fn restart(&self, _: &str, _: Duration, _: &Stop) -> Result<(), SystemdError> {
            Ok(())
        }
        fn run_transient(
            &self,
            unit: &str,
            _: &[String],
            _: Duration,
            _: &Stop,
        ) -> Result<(), SystemdError> {
            Err(SystemdError::Call {
                call: format!("StartTransientUnit {unit}"),
                message: "unsandboxed transient units are not used for the helper".into(),
            })
        }
        fn run_privileged_helper(
            &self,
            helper: PrivilegedHelper,
            unit: &str,
            argv: &[String],
            _: Duration,
            _: &Stop,
        ) -> Result<(), SystemdError> {
            let (prefix, run): (_, RunWords) = match helper {
                PrivilegedHelper::PciConfig => (super::UNIT_PREFIX, super::execute_words),
                PrivilegedHelper::KernelLog => (
                    super::super::kmsg_helper::UNIT_PREFIX,
                    super::super::kmsg_helper::execute_words,
                ),
                PrivilegedHelper::Selftest => unreachable!("the helpers' tests run no selftest"),
            };
            assert!(unit.starts_with(prefix), "{unit}");
            self.runs.lock().unwrap().push(argv[1..].join(" "));
            run(&self.sys, &self.out, argv).map_err(|e| SystemdError::JobFailed {
                unit: unit.to_owned(),
                job: "start",
                result: format!("failed ({e})"),
            })
        }
    }
}

#[cfg(test)]
#[path = "pci_helper_tests.rs"]
mod tests;
