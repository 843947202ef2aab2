//! Real systemd as PID 1 in a systemd-nspawn container, for system tests.
//!
//! The rootfs (Debian bookworm with systemd, dbus, containerd, runc, curl) is built
//! once with mmdebstrap and cached under /var/cache/rdma-node-agent/rootfs/<key>;
//! each boot uses --volatile=overlay, so the cache is never modified. Everything
//! is stopped by PID, also when a test panics.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const CACHE: &str = "/var/cache/rdma-node-agent/rootfs";
// ansible-core and python3-apt: the Ansible role runs inside the machine (connection local).
const PACKAGES: &str = "systemd,systemd-sysv,dbus,containerd,runc,curl,iproute2,procps,ca-certificates,ansible-core,python3-apt";
/// Bump when the recipe changes, so old caches are not reused.
const RECIPE: &str = "1";

fn require(tool: &str, package: &str) {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {tool}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{tool} is not installed (Debian package {package}): run scripts/test.sh"
    );
}

/// The cached rootfs, built on first use. Concurrent callers wait for one build.
pub fn rootfs() -> PathBuf {
    assert!(nix::unistd::geteuid().is_root(), "system tests need root");
    require("systemd-nspawn", "systemd-container");
    require("mmdebstrap", "mmdebstrap");
    let key: String = Sha256::digest(format!("{RECIPE}:{PACKAGES}"))
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = Path::new(CACHE).join(format!("bookworm-{key}"));
    fs::create_dir_all(CACHE).unwrap();
    let lock = fs::File::create(Path::new(CACHE).join(".lock")).unwrap();
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive).unwrap();
    if dir.join("usr/lib/systemd/systemd").exists() {
        return dir;
    }
    let tmp = Path::new(CACHE).join(format!(".build-{key}"));
    let _ = fs::remove_dir_all(&tmp);
    let start = Instant::now();
    let out = Command::new("mmdebstrap")
        .args([
            "--variant=minbase",
            &format!("--include={PACKAGES}"),
            "bookworm",
        ])
        .arg(&tmp)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mmdebstrap failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Renamed into place whole: an interrupted build never leaves half a rootfs.
    fs::rename(&tmp, &dir).unwrap();
    println!("built {} in {:?}", dir.display(), start.elapsed());
    dir
}

pub struct Machine {
    nspawn: Child,
    /// The container's PID 1 (systemd), as the host sees it.
    pub pid1: i32,
}

impl Machine {
    pub fn boot() -> Machine {
        let root = rootfs();
        let start = Instant::now();
        let nspawn = Command::new("systemd-nspawn")
            .args(["-q", "-b", "-D"])
            .arg(&root)
            // --register=no and --keep-unit: the host's PID 1 is not systemd here.
            .args([
                "--volatile=overlay",
                "--private-network",
                "--register=no",
                "--keep-unit",
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut m = Machine { nspawn, pid1: 0 };
        m.pid1 = loop {
            if let Some(p) = child_of(m.nspawn.id() as i32) {
                break p;
            }
            assert!(
                start.elapsed() < Duration::from_secs(30),
                "nspawn started no container"
            );
            std::thread::sleep(Duration::from_millis(50));
        };
        loop {
            let state = m.sh("systemctl is-system-running 2>/dev/null || true");
            let state = state.trim();
            if state == "running" {
                break;
            }
            if state == "degraded" {
                println!(
                    "degraded boot; failed units:\n{}",
                    m.sh("systemctl --failed --no-legend")
                );
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "boot did not finish: {state}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        println!("booted systemd in nspawn in {:?}", start.elapsed());
        m
    }

    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["-t", &self.pid1.to_string(), "-a"])
            .args(args)
            .output()
            .unwrap()
    }

    /// Runs a shell command inside; returns stdout (stderr is printed when it fails).
    pub fn sh(&self, script: &str) -> String {
        let o = self.exec(&["sh", "-c", script]);
        if !o.status.success() {
            println!(
                "[{script}] exited {:?}: {}",
                o.status.code(),
                String::from_utf8_lossy(&o.stderr)
            );
        }
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A path inside the running container, as the host sees it.
    pub fn path(&self, p: &str) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root/{}",
            self.pid1,
            p.trim_start_matches('/')
        ))
    }

    pub fn install(&self, src: &Path, dst: &str, mode: u32) {
        use std::os::unix::fs::PermissionsExt;
        let target = self.path(dst);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::copy(src, &target).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(mode)).unwrap();
    }

    pub fn write(&self, dst: &str, text: &str) {
        let target = self.path(dst);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::write(target, text).unwrap();
    }

    pub fn read(&self, p: &str) -> String {
        fs::read_to_string(self.path(p)).unwrap_or_default()
    }

    pub fn main_pid(&self, unit: &str) -> u32 {
        self.sh(&format!("systemctl show -P MainPID {unit}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// Waits for a condition checked inside, up to `limit`; returns how long it took.
    pub fn wait(
        &self,
        what: &str,
        limit: Duration,
        mut cond: impl FnMut(&Machine) -> bool,
    ) -> Duration {
        let start = Instant::now();
        while !cond(self) {
            assert!(
                start.elapsed() < limit,
                "timed out after {limit:?} waiting for {what}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        start.elapsed()
    }
}

fn child_of(pid: i32) -> Option<i32> {
    let children = fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
    children.split_whitespace().next()?.parse().ok()
}

impl Drop for Machine {
    fn drop(&mut self) {
        // SIGRTMIN+4 asks systemd for a clean poweroff; nspawn then exits.
        let _ = Command::new("kill")
            .args(["-s", "RTMIN+4", &self.pid1.to_string()])
            .status();
        let start = Instant::now();
        while self.nspawn.try_wait().ok().flatten().is_none() {
            if start.elapsed() > Duration::from_secs(20) {
                let _ = self.nspawn.kill();
                let _ = self.nspawn.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}
