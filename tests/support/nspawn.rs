//! Real systemd as PID 1 in a systemd-nspawn container, for system tests.
//!
//! The rootfs (Debian bookworm with systemd, dbus, containerd, runc, curl) is built
//! once with mmdebstrap and cached under /var/cache/rdma-node-agent/rootfs/<key>;
//! every boot uses `--volatile=overlay` (a tmpfs over it), so the cache is never
//! modified and each machine starts from the same state.
//!
//! Host quirks handled here (this CI host: PID 1 is not systemd, cgroup v1 hybrid):
//! - `--register=no --keep-unit`: there is no systemd/machined on the host to ask
//!   for a scope.
//! - With `--keep-unit` nspawn puts itself into `<own cgroup>/supervisor` and the
//!   container into `<own cgroup>/payload`. Started from the root cgroup, two
//!   machines would share `/payload` (their units' cgroups collide), so each
//!   machine is started in a cgroup of its own, removed again after poweroff.
//! - `--machine=<unique name>`: the name defaults to the directory's name, and
//!   nspawn keeps per-name state under /run/systemd/nspawn/propagate/.
//! - `--tmpfs=/var/lib/containerd`: containerd's overlayfs snapshotter passes its
//!   self-check on the volatile overlay root, but mounting a snapshot there fails
//!   (EINVAL: overlayfs as an upper layer); on tmpfs it works.
//! - `--system-call-filter=add_key keyctl request_key`: runc creates a session
//!   keyring for each container; nspawn's seccomp filter denies that by default.
//!
//! What does not work on a cgroup v1 hybrid host: running containers inside. The
//! v1 controllers are mounted read-only in the container (runc cannot create its
//! cgroups), and in unified mode (SYSTEMD_NSPAWN_UNIFIED_HIERARCHY=1) the
//! controllers are missing (the host binds them to v1; runc fails on cpu.weight).
//! containerd itself, its CRI plugin, images and snapshots work.
//!
//! Everything is stopped by PID, also when a test panics (Drop).

use std::fs;
use std::io::{Read, Seek};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use sha2::{Digest, Sha256};

const CACHE: &str = "/var/cache/rdma-node-agent/rootfs";
/// What the machine needs: systemd as init, the system bus, the containerd the
/// agent prepares, and the tools the tests run inside (ctr comes with containerd).
const PACKAGES: &[&str] = &[
    "systemd",
    "systemd-sysv",
    "dbus",
    "containerd",
    "runc",
    "curl",
    "iproute2",
    "procps",
    // The Ansible role runs inside the machine, with a local connection.
    "ansible-core",
    "python3-apt",
];
/// Bump when the recipe below changes, so that old caches are not reused.
const RECIPE: &str = "nspawn-3";
const BOOT_LIMIT: Duration = Duration::from_secs(60);
const POWEROFF_LIMIT: Duration = Duration::from_secs(20);
/// A clean PATH inside: the host's (cargo, pyenv …) means nothing there.
const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

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

fn require_prerequisites() {
    assert!(
        nix::unistd::geteuid().is_root(),
        "systemd-nspawn system tests need root: run scripts/test.sh"
    );
    require("systemd-nspawn", "systemd-container");
    require("mmdebstrap", "mmdebstrap");
    require("nsenter", "util-linux");
}

fn mmdebstrap_args() -> Vec<String> {
    let mut args = vec![
        "--variant=minbase".to_owned(),
        "--format=directory".to_owned(),
        format!("--include={}", PACKAGES.join(",")),
    ];
    // Documentation is a third of a minimal system and no test reads it.
    for p in ["doc", "man", "info", "locale"] {
        args.push(format!("--dpkgopt=path-exclude=/usr/share/{p}/*"));
    }
    // Without /etc/hostname (mmdebstrap copies the host's) the container's
    // hostname is its machine name, which tells journal lines apart.
    args.push("--customize-hook=rm -f \"$1/etc/hostname\"".to_owned());
    args.push("bookworm".to_owned());
    args
}

/// The cached rootfs, built on first use (about a minute). Concurrent callers, in
/// this process or others, wait on a lock file for one build.
pub fn rootfs() -> PathBuf {
    require_prerequisites();
    let args = mmdebstrap_args();
    let key: String = Sha256::digest(format!("{RECIPE}\n{}", args.join("\n")))
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    let dir = Path::new(CACHE).join(format!("bookworm-{key}"));
    // A complete rootfs only ever appears by rename, so its presence is enough.
    if dir.is_dir() {
        return dir;
    }
    fs::create_dir_all(CACHE).unwrap();
    let lock = fs::File::create(Path::new(CACHE).join(".lock")).unwrap();
    let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
        .unwrap_or_else(|(_, e)| panic!("cannot lock {CACHE}/.lock: {e}"));
    if dir.is_dir() {
        return dir; // built by whoever held the lock before us
    }
    // Leftovers of an interrupted build are never reused.
    let tmp = Path::new(CACHE).join(format!(".build-{key}"));
    if tmp.exists() {
        fs::remove_dir_all(&tmp).unwrap();
    }
    let start = Instant::now();
    let out = Command::new("mmdebstrap")
        .args(&args)
        .arg(&tmp)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "mmdebstrap failed (is deb.debian.org reachable?):\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        tmp.join("usr/lib/systemd/systemd").exists(),
        "mmdebstrap built no systemd"
    );
    fs::rename(&tmp, &dir).unwrap();
    println!("built rootfs {} in {:.1?}", dir.display(), start.elapsed());
    dir
}

/// The cgroup hierarchies nspawn must be placed in: on a hybrid host both the
/// unified one and the named systemd v1 one, on a pure v2 host the root.
fn cgroup_roots() -> Vec<PathBuf> {
    let unified = Path::new("/sys/fs/cgroup/unified");
    if unified.join("cgroup.procs").exists() {
        let mut roots = vec![unified.to_path_buf()];
        let v1 = Path::new("/sys/fs/cgroup/systemd");
        if v1.join("cgroup.procs").exists() {
            roots.push(v1.to_path_buf());
        }
        roots
    } else {
        vec![PathBuf::from("/sys/fs/cgroup")]
    }
}

/// Removes a cgroup tree bottom-up (cgroups are removed with rmdir, files and all).
fn remove_cgroup(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return Ok(());
    }
    for e in fs::read_dir(dir)? {
        let e = e?;
        if e.file_type()?.is_dir() {
            remove_cgroup(&e.path())?;
        }
    }
    fs::remove_dir(dir)
}

/// Cgroups of machines whose test process was killed (no Drop ran; nspawn got
/// SIGTERM from PR_SET_PDEATHSIG and stopped): removed when empty.
fn sweep_stale_cgroups() {
    for root in cgroup_roots() {
        for e in fs::read_dir(&root).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Some(pid) = name
                .strip_prefix("rna-test-")
                .and_then(|r| r.split('-').next())
            else {
                continue;
            };
            if !Path::new("/proc").join(pid).exists() {
                let _ = remove_cgroup(&e.path());
            }
        }
    }
}

pub struct Machine {
    pub name: String,
    nspawn: Child,
    /// The container's PID 1 (systemd), as the host sees it.
    pub pid1: i32,
    cgroups: Vec<PathBuf>,
    /// nspawn's console output, shown when boot fails.
    console: tempfile::NamedTempFile,
    stopped: bool,
}

impl Machine {
    /// Boots the cached rootfs and waits (60 s at most) until systemd reports the
    /// boot finished. Panics, after powering the machine off, when it does not.
    pub fn boot() -> Machine {
        Machine::boot_with(&[])
    }

    /// `boot` with more systemd-nspawn arguments (e.g. `--bind-ro=SRC:DST`).
    pub fn boot_with(extra: &[&str]) -> Machine {
        let root = rootfs();
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let name = format!(
            "rna-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        sweep_stale_cgroups();
        let cgroups: Vec<PathBuf> = cgroup_roots().into_iter().map(|r| r.join(&name)).collect();
        for cg in &cgroups {
            fs::create_dir_all(cg).unwrap_or_else(|e| panic!("cgroup {}: {e}", cg.display()));
        }
        let console = tempfile::NamedTempFile::new().unwrap();
        let start = Instant::now();
        // A shell joins the machine's cgroups and then becomes nspawn, so that
        // nspawn starts in them (no allocation between fork and exec in Rust).
        let join: String = cgroups
            .iter()
            .map(|cg| format!("echo $$ > {}/cgroup.procs && ", cg.display()))
            .collect();
        let mut cmd = Command::new("sh");
        cmd.arg("-c")
            .arg(format!("{join}exec \"$@\""))
            .arg("sh")
            .args(["systemd-nspawn", "--quiet", "--boot", "--directory"])
            .arg(&root)
            .arg(format!("--machine={name}"))
            .args([
                "--volatile=overlay",
                "--private-network",
                "--register=no",
                "--keep-unit",
                "--tmpfs=/var/lib/containerd",
                "--system-call-filter=add_key keyctl request_key",
            ])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(console.reopen().unwrap())
            .stderr(console.reopen().unwrap());
        // If the test process dies without unwinding, nspawn gets SIGTERM, which
        // it turns into a clean shutdown of the container.
        unsafe {
            cmd.pre_exec(|| {
                nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM)
                    .map_err(std::io::Error::from)
            });
        }
        let nspawn = match cmd.spawn() {
            Ok(child) => child,
            Err(e) => {
                for cg in &cgroups {
                    let _ = fs::remove_dir(cg);
                }
                panic!("cannot start systemd-nspawn: {e}");
            }
        };
        // From here on Drop powers the machine off, also when boot fails.
        let mut m = Machine {
            name,
            nspawn,
            pid1: 0,
            cgroups,
            console,
            stopped: false,
        };
        m.pid1 = loop {
            if let Some(p) = container_init(m.nspawn.id() as i32) {
                break p;
            }
            if let Ok(Some(status)) = m.nspawn.try_wait() {
                panic!("systemd-nspawn exited ({status}):\n{}", m.console());
            }
            m.check_boot_time(start, "no container process");
            std::thread::sleep(Duration::from_millis(20));
        };
        let last = loop {
            let o = m.exec(&["systemctl", "is-system-running"]);
            let last = String::from_utf8_lossy(&o.stdout).trim().to_owned();
            match last.as_str() {
                "running" => break last,
                "degraded" => {
                    println!(
                        "{}: boot degraded; failed units:\n{}",
                        m.name,
                        m.sh("systemctl --failed --no-legend --no-pager")
                    );
                    break last;
                }
                _ => {}
            }
            m.check_boot_time(start, &format!("systemctl is-system-running: {last:?}"));
            std::thread::sleep(Duration::from_millis(50));
        };
        println!(
            "{}: booted to {last} in {:.2?} (PID 1 = {} on the host)",
            m.name,
            start.elapsed(),
            m.pid1
        );
        m
    }

    fn check_boot_time(&self, start: Instant, what: &str) {
        if start.elapsed() > BOOT_LIMIT {
            panic!(
                "{}: boot did not finish in {BOOT_LIMIT:?} ({what}); console:\n{}",
                self.name,
                self.console()
            );
        }
    }

    /// What nspawn and the container printed on the console so far.
    pub fn console(&self) -> String {
        let mut f = self.console.reopen().unwrap();
        let mut s = String::new();
        f.rewind().unwrap();
        f.read_to_string(&mut s).unwrap();
        s
    }

    /// Runs a command inside the container (all its namespaces, its root), with
    /// a clean environment. Not inside its cgroups: use `systemd-run` for that.
    pub fn exec(&self, args: &[&str]) -> Output {
        Command::new("nsenter")
            .args(["--target", &self.pid1.to_string(), "--all"])
            .args(args)
            .env_clear()
            .env("PATH", PATH)
            .env("LANG", "C.UTF-8")
            .stdin(Stdio::null())
            .output()
            .expect("cannot run nsenter")
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

    /// Like `sh`, but panics with the command's stderr when it fails.
    pub fn sh_ok(&self, script: &str) -> String {
        let o = self.exec(&["sh", "-c", script]);
        assert!(
            o.status.success(),
            "{}: [{script}] exited {:?}: {}{}",
            self.name,
            o.status.code(),
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// A path inside the running container, as the host sees it (through its
    /// PID 1's root): read and write files there directly.
    pub fn root_path(&self, p: &str) -> PathBuf {
        PathBuf::from(format!(
            "/proc/{}/root/{}",
            self.pid1,
            p.trim_start_matches('/')
        ))
    }

    /// Same as `root_path`.
    pub fn path(&self, p: &str) -> PathBuf {
        self.root_path(p)
    }

    /// The container's system bus, reachable from the host (EXTERNAL auth as
    /// root works: uid 0 on both sides).
    pub fn bus_socket(&self) -> PathBuf {
        self.root_path("/run/dbus/system_bus_socket")
    }

    /// D-Bus address of the container's system bus, for zbus or busctl --address.
    pub fn bus_address(&self) -> String {
        format!("unix:path={}", self.bus_socket().display())
    }

    /// Copies a host file into the container with `mode`, replacing the target
    /// by rename (so a running binary can be replaced, and readers never see
    /// half a file).
    pub fn install(&self, src: &Path, dst: &str, mode: u32) {
        let target = self.root_path(dst);
        let dir = target.parent().unwrap();
        fs::create_dir_all(dir).unwrap();
        let tmp = dir.join(format!(
            ".{}.tmp",
            target.file_name().unwrap().to_string_lossy()
        ));
        fs::copy(src, &tmp).unwrap_or_else(|e| panic!("copy {} into {dst}: {e}", src.display()));
        fs::set_permissions(&tmp, fs::Permissions::from_mode(mode)).unwrap();
        fs::rename(&tmp, &target).unwrap();
    }

    /// Writes a file inside the container (parents created, mode 0644).
    pub fn write(&self, dst: &str, text: &str) {
        let target = self.root_path(dst);
        fs::create_dir_all(target.parent().unwrap()).unwrap();
        fs::write(&target, text).unwrap();
        fs::set_permissions(&target, fs::Permissions::from_mode(0o644)).unwrap();
    }

    /// A file inside the container, or "" when it does not exist.
    pub fn read(&self, p: &str) -> String {
        fs::read_to_string(self.root_path(p)).unwrap_or_default()
    }

    /// The unit's MainPID as the container sees it (0 when not running).
    pub fn main_pid(&self, unit: &str) -> u32 {
        self.sh_ok(&format!("systemctl show -P MainPID {unit}"))
            .trim()
            .parse()
            .unwrap()
    }

    /// `/proc/<pid>/limits` inside the container's PID namespace.
    pub fn limits(&self, pid: u32) -> String {
        self.sh_ok(&format!("cat /proc/{pid}/limits"))
    }

    /// The unit's journal (journald inside the container), one line per entry.
    pub fn journal(&self, unit: &str) -> String {
        self.sh_ok(&format!(
            "journalctl --no-pager --quiet --output=short-precise -u {unit}"
        ))
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
            if start.elapsed() >= limit {
                // What systemd was doing, to tell a hung job from a slow machine.
                let state = self.sh(
                    "systemctl list-jobs --no-pager; systemctl --failed --no-pager; \
                     journalctl --no-pager -o short-monotonic -n 40",
                );
                panic!(
                    "{}: timed out after {limit:?} waiting for {what}; systemd's jobs, failed units and journal:\n{state}",
                    self.name
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        start.elapsed()
    }

    /// The host PID of nspawn (to check that nothing is left behind).
    pub fn nspawn_pid(&self) -> i32 {
        self.nspawn.id() as i32
    }

    /// Powers the machine off and waits for nspawn to exit; returns how long it
    /// took. After the bound, PID 1 (and with it the whole container) and then
    /// nspawn are killed. Drop does the same.
    pub fn poweroff(&mut self) -> Duration {
        let start = Instant::now();
        if self.stopped {
            return Duration::ZERO;
        }
        self.stopped = true;
        if self.pid1 > 0 {
            // SIGRTMIN+4 asks systemd for a clean poweroff (systemd(1)); it needs
            // neither nsenter nor a working bus.
            let sig = nix::libc::SIGRTMIN() + 4;
            unsafe { nix::libc::kill(self.pid1, sig) };
        } else {
            // Not booted yet: SIGTERM makes nspawn stop what it started.
            unsafe { nix::libc::kill(self.nspawn.id() as i32, nix::libc::SIGTERM) };
        }
        let clean = self.wait_exit(POWEROFF_LIMIT);
        if !clean {
            eprintln!(
                "{}: no clean poweroff in {POWEROFF_LIMIT:?}, killing",
                self.name
            );
            if self.pid1 > 0 {
                // Killing a PID namespace's init kills every process in it.
                unsafe { nix::libc::kill(self.pid1, nix::libc::SIGKILL) };
            }
            if !self.wait_exit(Duration::from_secs(5)) {
                let _ = self.nspawn.kill();
                let _ = self.nspawn.wait();
            }
        }
        for cg in &self.cgroups {
            if let Err(e) = remove_cgroup(cg) {
                eprintln!("{}: cannot remove cgroup {}: {e}", self.name, cg.display());
            }
        }
        let took = start.elapsed();
        println!("{}: powered off in {took:.2?}", self.name);
        took
    }

    fn wait_exit(&mut self, limit: Duration) -> bool {
        let start = Instant::now();
        loop {
            if let Ok(Some(_)) = self.nspawn.try_wait() {
                return true;
            }
            if start.elapsed() > limit {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// nspawn's child that is PID 1 of a new PID namespace and has exec'd init
/// (before exec it still is a copy of nspawn).
fn container_init(nspawn: i32) -> Option<i32> {
    let children = fs::read_to_string(format!("/proc/{nspawn}/task/{nspawn}/children")).ok()?;
    children
        .split_whitespace()
        .filter_map(|c| c.parse::<i32>().ok())
        .find(|&c| {
            let status = fs::read_to_string(format!("/proc/{c}/status")).unwrap_or_default();
            let nspid_is_1 = status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_whitespace().last())
                == Some("1");
            let comm = fs::read_to_string(format!("/proc/{c}/comm")).unwrap_or_default();
            nspid_is_1 && comm.trim() != "systemd-nspawn"
        })
}

impl Drop for Machine {
    fn drop(&mut self) {
        self.poweroff();
    }
}
