//! One VM tier's run, shared by tests/vm_rxe.rs and tests/vm_acs.rs: the
//! switch that turns the tiers off, the override that asserts on an earlier
//! run's records, the root check, one VM at a time on the machine, the payload
//! (the agent's .deb, installed in the guest and run under its unit; the
//! tier's guest script; its extras) and
//! `tests/vm/run.sh`, with the figures printed past the test harness's capture.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Instant;

/// What differs between the tiers.
pub struct Tier {
    /// The test binary's name, prefixing what it prints: `vm_rxe`.
    pub name: &'static str,
    /// In words, for "… is turned off" and "… could not run".
    pub what: &'static str,
    /// Its guest script under tests/vm/, run as the payload's guest.sh.
    pub guest: &'static str,
    /// Under /var/cache/rdma-node-agent/vm/: the last run's records, kept for a human.
    pub results: &'static str,
    /// Names a directory of an earlier run's records to assert on, no VM booted.
    pub results_env: &'static str,
    /// tests/vm/run.sh's settings (machine, kernel command line, boots).
    pub env: &'static [(&'static str, &'static str)],
    /// Puts the tier's extras into the payload directory.
    pub payload: fn(&Path) -> Result<(), String>,
}

/// Printed past the test harness's capture: the tier's figures belong in the log.
pub fn say(text: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

/// The results directory of the tier's one VM run in this test binary, or
/// None when the tiers are turned off (`RDMA_AGENT_VM=0`, said loudly).
pub fn results(
    tier: &'static Tier,
    run: &'static OnceLock<Result<PathBuf, String>>,
) -> Option<&'static Path> {
    if std::env::var("RDMA_AGENT_VM").as_deref() == Ok("0") {
        say(&format!(
            "{}: RDMA_AGENT_VM=0: {} is turned off, nothing was tested",
            tier.name, tier.what
        ));
        return None;
    }
    // Assertions on an earlier run's records, without booting (for working on
    // the assertions themselves): said loudly, never set by scripts/test.sh.
    if let Some(dir) = std::env::var_os(tier.results_env) {
        say(&format!(
            "{}: {}: asserting on the records in {}, no VM booted",
            tier.name,
            tier.results_env,
            Path::new(&dir).display()
        ));
        return Some(Box::leak(PathBuf::from(dir).into_boxed_path()));
    }
    match run.get_or_init(|| boot(tier)) {
        Ok(p) => Some(p.as_path()),
        Err(e) => panic!("{} could not run: {e}", tier.what),
    }
}

/// The package under test, as scripts/test.sh names it: the guest installs it
/// as a node does. Never the debug binary instead.
fn deb() -> Result<PathBuf, String> {
    let Some(deb) = std::env::var_os("RDMA_AGENT_DEB").map(PathBuf::from) else {
        return Err(
            "RDMA_AGENT_DEB is not set: the VM tiers install the package in the guest. \
             Build it with `CARGO_TARGET_DIR=/var/cache/rdma-node-agent/target-release \
             scripts/package.sh`, then set RDMA_AGENT_DEB to the \
             dist/rdma-node-agent_<version>-1_amd64.deb it lists (scripts/test.sh does both), \
             or RDMA_AGENT_VM=0 to turn the VM tiers off"
                .into(),
        );
    };
    if !deb.is_file() {
        return Err(format!(
            "RDMA_AGENT_DEB={} does not exist: build it with `scripts/package.sh` \
             (CARGO_TARGET_DIR names where; its dist/ holds the .deb)",
            deb.display()
        ));
    }
    Ok(deb)
}

fn boot(tier: &Tier) -> Result<PathBuf, String> {
    if !nix::unistd::geteuid().is_root() {
        return Err("it needs root (the VM image, QEMU): run scripts/test.sh, or RDMA_AGENT_VM=0 to turn it off".into());
    }
    let here = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/vm");
    let deb = deb()?;
    let cache = Path::new("/var/cache/rdma-node-agent/vm");
    fs::create_dir_all(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
    // One VM at a time on the machine (2 cores; ~1.3 GiB each), and one owner
    // of each tier's last records: another checkout's run waits here.
    let lock = fs::File::create(cache.join(".run.lock")).map_err(|e| e.to_string())?;
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .map_err(|(_, e)| format!("cannot lock {}/.run.lock: {e}", cache.display()))?;
    let payload = tempfile::tempdir_in(cache).map_err(|e| e.to_string())?;
    let copy = |from: &Path, to: &str| {
        fs::copy(from, payload.path().join(to))
            .map(drop)
            .map_err(|e| format!("{}: {e}", from.display()))
    };
    copy(&deb, "rdma-node-agent.deb")?;
    copy(&here.join(tier.guest), "guest.sh")?;
    copy(&here.join("steps.sh"), "steps.sh")?;
    copy(&here.join("driver-steps.sh"), "driver-steps.sh")?;
    (tier.payload)(payload.path())?;
    let results = cache.join(tier.results);
    if results.exists() {
        fs::remove_dir_all(&results).map_err(|e| e.to_string())?;
    }
    say(&format!(
        "{}: booting the VM with {}",
        tier.name,
        deb.display()
    ));
    let start = Instant::now();
    let out = Command::new(here.join("run.sh"))
        .arg(payload.path())
        .arg(&results)
        .envs(tier.env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::inherit())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("cannot run tests/vm/run.sh: {e}"))?;
    let log = String::from_utf8_lossy(&out.stderr);
    say(log.trim_end());
    if !out.status.success() {
        return Err(log.lines().last().unwrap_or("run.sh failed").to_owned());
    }
    // The guest's own uptimes at its early steps (before the agent's unit),
    // its main steps (the system up) and the end of each boot (steps.sh).
    for b in 1.. {
        let f = |n: &str| {
            fs::read_to_string(results.join(format!("boot{b}-{n}-uptime")))
                .ok()
                .and_then(|t| t.trim().parse::<f64>().ok())
        };
        let (Some(early), Some(main), Some(end)) = (f("init"), f("main"), f("end")) else {
            break;
        };
        say(&format!(
            "{}: boot {b}: kernel to early steps {early:.1} s, to the system up {main:.1} s, tests {:.1} s",
            tier.name,
            end - early
        ));
    }
    say(&format!(
        "{name}: steps (guest seconds):\n{}{name}: whole tier {:.0} s",
        fs::read_to_string(results.join("times")).unwrap_or_default(),
        start.elapsed().as_secs_f64(),
        name = tier.name,
    ));
    Ok(results)
}
