//! The real .deb installed into real systemd (nspawn): install → running and
//! converged → upgrade keeps the operator's config → purge leaves every touched
//! file byte-identical to before install. The .rpm is inspected, installed into
//! a scratch root, and its %post run on real systemd under a `disable *` preset
//! as RHEL ships it. The Ansible role: tests/system_rollout.rs.
//!
//! scripts/test.sh builds the packages first (scripts/package.sh) and passes
//! their paths in RDMA_AGENT_DEB, RDMA_AGENT_DEB_UPGRADE and RDMA_AGENT_RPM.

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use support::nspawn::Machine;

fn package(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run scripts/test.sh, which builds the packages")
    });
    assert!(p.exists(), "{} does not exist", p.display());
    p
}

/// Config the node's operator puts in place: 4 MiB, as this machine's hard
/// memlock limit of 8 MiB allows no more for containerd itself.
const NODE_CONFIG: &str = "[containerd]\nmemlock = \"4MiB\"\n\n[systemd]\nmemlock = \"4MiB\"\n\n\
    # The test machines' kernel has no module support (no /proc/modules).\n[kernel]\nrequired_modules = []\n";

/// The man pages: the command's, and one for each subcommand it names.
const MAN_PAGES: &[&str] = &[
    "rdma-node-agent.8",
    "rdma-node-agent-check.8",
    "rdma-node-agent-plan.8",
    "rdma-node-agent-apply.8",
    "rdma-node-agent-serve.8",
    "rdma-node-agent-status.8",
    "rdma-node-agent-selftest.8",
    "rdma-node-agent-fleet.8",
    "rdma-node-agent-revert.8",
    "rdma-node-agent-gate.8",
    "rdma-node-agent-gate-reset.8",
];

/// Files the agent may touch, with their bytes (None: absent).
fn touched(m: &Machine) -> BTreeMap<&'static str, Option<Vec<u8>>> {
    [
        "/etc/containerd/config.toml",
        "/etc/containerd/rdma-node-agent/base-spec.json",
        "/etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf",
        "/etc/modprobe.d/rdma-node-agent.conf",
        "/etc/kubernetes/node-feature-discovery/features.d/rdma-node-agent",
    ]
    .into_iter()
    .map(|p| (p, std::fs::read(m.path(p)).ok()))
    .collect()
}

fn apt(m: &Machine, args: &str) {
    let out = m.exec(&[
        "sh",
        "-c",
        &format!(
            "DEBIAN_FRONTEND=noninteractive apt-get -o Dpkg::Options::=--force-confold -y {args}"
        ),
    ]);
    assert!(
        out.status.success(),
        "apt-get {args}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn ready(m: &Machine) -> bool {
    m.sh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:9470/readyz") == "200"
}

#[test]
#[ignore = "needs root, systemd-nspawn and the built packages: run via scripts/test.sh"]
fn deb_install_upgrade_purge_leaves_no_trace() {
    let deb = package("RDMA_AGENT_DEB");
    let upgrade = package("RDMA_AGENT_DEB_UPGRADE");
    let m = Machine::boot();
    let before = touched(&m);
    let containerd_pid = m.main_pid("containerd");

    m.write("/etc/rdma-node-agent/config.toml", NODE_CONFIG);
    m.install(&deb, "/var/tmp/agent.deb", 0o644);
    apt(&m, "install /var/tmp/agent.deb");
    assert_eq!(
        m.sh("systemctl is-enabled rdma-node-agent").trim(),
        "enabled"
    );
    assert_eq!(m.sh("systemctl is-active rdma-node-agent").trim(), "active");
    m.wait("/readyz 200", Duration::from_secs(30), ready);
    assert!(
        m.read("/etc/containerd/config.toml")
            .contains("base_runtime_spec")
    );
    assert_ne!(
        m.main_pid("containerd"),
        containerd_pid,
        "containerd restarted once"
    );
    // The test machine drops /usr/share/man at install: look in the package itself.
    let contents = Command::new("dpkg-deb")
        .arg("-c")
        .arg(&deb)
        .output()
        .unwrap();
    let contents = String::from_utf8_lossy(&contents.stdout);
    for page in MAN_PAGES {
        assert!(
            contents.contains(&format!("./usr/share/man/man8/{page}.gz")),
            "{page} not in the .deb:\n{contents}"
        );
    }
    assert!(
        m.path("/usr/share/bash-completion/completions/rdma-node-agent")
            .exists()
    );

    // The operator edits the config; an upgrade keeps it and restarts the agent.
    let edited =
        format!("{NODE_CONFIG}\n# edited by the operator\n[daemon]\ninterval_secs = 120\n");
    m.write("/etc/rdma-node-agent/config.toml", &edited);
    let agent_pid = m.main_pid("rdma-node-agent");
    m.install(&upgrade, "/var/tmp/agent-upgrade.deb", 0o644);
    apt(&m, "install /var/tmp/agent-upgrade.deb");
    assert_eq!(
        m.read("/etc/rdma-node-agent/config.toml"),
        edited,
        "upgrade kept the operator's config"
    );
    assert_ne!(
        m.main_pid("rdma-node-agent"),
        agent_pid,
        "upgrade restarted the agent"
    );
    m.wait("/readyz 200 after upgrade", Duration::from_secs(30), ready);

    apt(&m, "purge rdma-node-agent");
    let after = touched(&m);
    for (path, bytes) in &before {
        assert_eq!(&after[path], bytes, "{path} is not as before install");
    }
    for gone in [
        "/lib/systemd/system/rdma-node-agent.service",
        "/usr/bin/rdma-node-agent",
        "/var/lib/rdma-node-agent",
        "/etc/rdma-node-agent",
        "/etc/containerd/rdma-node-agent",
    ] {
        assert!(!m.path(gone).exists(), "{gone} left behind");
    }
    assert_eq!(m.sh("systemctl is-active containerd").trim(), "active");
    // Reverted and restarted: containerd runs without the agent's limit again.
    assert_eq!(
        m.sh("systemctl show -P LimitMEMLOCK containerd").trim(),
        "8388608"
    );
}

#[test]
#[ignore = "needs the built packages and rpm: run via scripts/test.sh"]
fn rpm_contents_scripts_and_scratch_install() {
    let rpm = package("RDMA_AGENT_RPM");
    let list = Command::new("rpm")
        .arg("-qpl")
        .arg(&rpm)
        .output()
        .expect("rpm is installed by scripts/test.sh");
    let list = String::from_utf8_lossy(&list.stdout);
    let pages = MAN_PAGES.iter().map(|p| format!("/usr/share/man/man8/{p}"));
    for f in [
        "/usr/bin/rdma-node-agent",
        "/usr/lib/systemd/system/rdma-node-agent.service",
        "/usr/lib/systemd/system-preset/50-rdma-node-agent.preset",
        "/etc/rdma-node-agent/config.toml",
    ]
    .map(String::from)
    .into_iter()
    .chain(pages)
    {
        assert!(list.lines().any(|l| l == f), "{f} not in the rpm:\n{list}");
    }
    let config = Command::new("rpm")
        .args(["-qpc"])
        .arg(&rpm)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&config.stdout).contains("/etc/rdma-node-agent/config.toml"));
    let scripts = Command::new("rpm")
        .args(["-qp", "--scripts"])
        .arg(&rpm)
        .output()
        .unwrap();
    let scripts = String::from_utf8_lossy(&scripts.stdout);
    assert!(scripts.contains("preuninstall scriptlet"), "{scripts}");
    assert!(
        scripts.contains("/usr/bin/rdma-node-agent revert"),
        "{scripts}"
    );

    // Into a scratch root, without scriptlets (no systemd there): files land where declared.
    let root = tempfile::tempdir().unwrap();
    let out = Command::new("rpm")
        .arg("--root")
        .arg(root.path())
        .args(["--nodeps", "--noscripts", "-i"])
        .arg(&rpm)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(root.path().join("usr/bin/rdma-node-agent").exists());
    // One build for every RPM distribution, RHEL 8's glibc 2.28 included: the
    // binary needs no dynamic loader, so no glibc version, and none is required.
    let binary = std::fs::read(root.path().join("usr/bin/rdma-node-agent")).unwrap();
    assert!(!has_interpreter(&binary), "the packaged binary is dynamic");
    let requires = Command::new("rpm").arg("-qpR").arg(&rpm).output().unwrap();
    let requires = String::from_utf8_lossy(&requires.stdout);
    assert!(
        !requires.contains("GLIBC") && !requires.contains("libc.so"),
        "{requires}"
    );
    let version = Command::new(root.path().join("usr/bin/rdma-node-agent"))
        .arg("--version")
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&version.stdout).starts_with("rdma-node-agent "));
}

/// `apply` by the installed binary: a restart it could not ask systemd for is
/// pending (exit 2, and `pending:` on stderr says what to run), not success.
#[test]
#[ignore = "needs root, systemd-nspawn and the built packages: run via scripts/test.sh"]
fn apply_exits_2_naming_the_restart_it_could_not_ask_for() {
    let deb = package("RDMA_AGENT_DEB");
    let m = Machine::boot();
    m.write("/etc/rdma-node-agent/config.toml", NODE_CONFIG);
    m.install(&deb, "/var/tmp/agent.deb", 0o644);
    apt(&m, "install /var/tmp/agent.deb");
    m.wait("/readyz 200", Duration::from_secs(30), ready);
    // A new memlock needs a containerd restart; with the system bus gone
    // systemd cannot be asked for it.
    m.sh_ok("systemctl stop rdma-node-agent");
    m.write(
        "/etc/rdma-node-agent/config.toml",
        &NODE_CONFIG.replacen("4MiB", "2MiB", 1),
    );
    m.sh_ok("systemctl stop dbus.socket dbus.service");
    let out = m.exec(&["rdma-node-agent", "apply"]);
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stdout.contains("changed: /etc/containerd/rdma-node-agent/base-spec.json"),
        "{stdout}"
    );
    assert!(
        stderr.contains("pending: restart containerd.service: systemd is not reachable"),
        "{stderr}"
    );
}

/// The .rpm's files unpacked onto a real systemd node and its %post run as rpm
/// runs it at first install ($1 = 1), under RHEL's default preset, which
/// disables every service the package does not enable by a preset of its own.
#[test]
#[ignore = "needs root, systemd-nspawn, rpm and the built packages: run via scripts/test.sh"]
fn rpm_post_install_enables_and_starts_under_a_disable_all_preset() {
    let rpm = package("RDMA_AGENT_RPM");
    let m = Machine::boot();
    m.write(
        "/usr/lib/systemd/system-preset/90-default.preset",
        "# As RHEL 9 ships it, last line.\ndisable *\n",
    );
    m.write("/etc/rdma-node-agent/config.toml", NODE_CONFIG);
    // The files as rpm lays them out (into a scratch root: `--root` at the
    // machine would keep rpm's database on this host), then onto the node,
    // keeping the operator's config as %config(noreplace) does.
    let scratch = tempfile::tempdir().unwrap();
    let unpack = Command::new("rpm")
        .arg("--root")
        .arg(scratch.path())
        .args(["--nodeps", "--noscripts", "-i"])
        .arg(&rpm)
        .output()
        .unwrap();
    assert!(
        unpack.status.success(),
        "{}",
        String::from_utf8_lossy(&unpack.stderr)
    );
    let list = Command::new("rpm").arg("-qpl").arg(&rpm).output().unwrap();
    for f in String::from_utf8_lossy(&list.stdout).lines() {
        let src = scratch.path().join(f.trim_start_matches('/'));
        if src.is_file() && f != "/etc/rdma-node-agent/config.toml" {
            let mode =
                std::os::unix::fs::PermissionsExt::mode(&src.metadata().unwrap().permissions());
            m.install(&src, f, mode & 0o7777);
        }
    }
    assert!(
        m.path("/usr/lib/systemd/system-preset/50-rdma-node-agent.preset")
            .exists()
    );
    let post = Command::new("rpm")
        .args(["-qp", "--queryformat", "%{POSTIN}"])
        .arg(&rpm)
        .output()
        .unwrap();
    m.write("/root/postin.sh", &String::from_utf8_lossy(&post.stdout));
    m.sh_ok("sh /root/postin.sh 1");
    assert_eq!(
        m.sh("systemctl is-enabled rdma-node-agent").trim(),
        "enabled"
    );
    assert_eq!(m.sh("systemctl is-active rdma-node-agent").trim(), "active");
    m.wait("/readyz 200", Duration::from_secs(30), ready);
    // Without the package's preset, the same %post leaves it disabled.
    m.sh_ok(
        "systemctl disable --now rdma-node-agent && \
         rm /usr/lib/systemd/system-preset/50-rdma-node-agent.preset && sh /root/postin.sh 1",
    );
    assert_eq!(
        m.sh("systemctl is-enabled rdma-node-agent").trim(),
        "disabled"
    );
}

/// Whether a 64-bit little-endian ELF file asks for a dynamic loader (PT_INTERP).
fn has_interpreter(elf: &[u8]) -> bool {
    assert_eq!(&elf[..5], b"\x7fELF\x02", "not a 64-bit ELF file");
    let u16_at = |o: usize| u16::from_le_bytes(elf[o..o + 2].try_into().unwrap()) as usize;
    let phoff = u64::from_le_bytes(elf[0x20..0x28].try_into().unwrap()) as usize;
    let (phentsize, phnum) = (u16_at(0x36), u16_at(0x38));
    (0..phnum).any(|i| {
        let p = phoff + i * phentsize;
        u32::from_le_bytes(elf[p..p + 4].try_into().unwrap()) == 3 // PT_INTERP
    })
}
