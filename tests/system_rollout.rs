//! The Ansible role as the README tells it, with real ansible-playbook against a
//! real systemd node (nspawn; the node is its own controller, local connection)
//! and the .deb built by scripts/package.sh:
//! - report first: the config is templated before the package's first start, so
//!   report mode writes nothing; the gate waits for a reconcile with the rendered
//!   config, and an unconverged node is reported, not failed;
//! - `--check --diff` previews with `plan --config <rendered file>` and changes nothing;
//! - enforce converges, a second run changes nothing; keys of any table are set;
//! - a pinned version from a repository, then an upgrade;
//! - uninstall.yml reverts first: every touched file as before install;
//! - remote scraping: the role's drop-in lets the listed source through the unit's
//!   IP filter, and only it (a scraper in its own network namespace, over a veth).

mod support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use sha2::{Digest, Sha256};
use support::nspawn::Machine;

fn package(var: &str) -> PathBuf {
    let p = std::env::var_os(var).map(PathBuf::from).unwrap_or_else(|| {
        panic!("{var} is not set: run scripts/test.sh, which builds the packages")
    });
    assert!(p.exists(), "{} does not exist", p.display());
    p
}

/// Files the agent may touch, with their bytes (None: absent).
fn touched(m: &Machine) -> BTreeMap<&'static str, Option<Vec<u8>>> {
    [
        "/etc/containerd/config.toml",
        "/etc/containerd/rdma-node-agent/base-spec.json",
        "/etc/systemd/system/containerd.service.d/50-rdma-node-agent.conf",
        "/etc/modprobe.d/rdma-node-agent.conf",
    ]
    .into_iter()
    .map(|p| (p, std::fs::read(m.path(p)).ok()))
    .collect()
}

/// Variables every run here sets: 4 MiB (this machine's hard memlock limit of
/// 8 MiB allows no more for containerd itself); the test kernel has no module
/// support, so no module can be required; and a `[containerd]` key, which the
/// old `extra_config` could not set.
fn vars(mode: &str, more: serde_json::Value) -> serde_json::Value {
    let mut v = serde_json::json!({
        "rdma_node_agent_mode": mode,
        "rdma_node_agent_memlock": "4MiB",
        "rdma_node_agent_systemd_memlock": "4MiB",
        "rdma_node_agent_config": {
            "kernel": {"required_modules": []},
            "containerd": {"unit": "containerd.service", "memlock_via": "base-spec"},
        },
    });
    for (k, x) in more.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// The role copied into the machine, with the package files under dist/.
fn controller(m: &Machine, debs: &[(&Path, &str)]) {
    let ansible = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/ansible");
    let out = Command::new("cp")
        .arg("-r")
        .arg(&ansible)
        .arg(m.path("/root/ansible"))
        .output()
        .unwrap();
    assert!(out.status.success());
    for (deb, name) in debs {
        m.install(deb, &format!("/root/ansible/dist/{name}"), 0o644);
    }
    m.write(
        "/root/ansible/test-inventory.ini",
        "[rdma_nodes]\nlocalhost ansible_connection=local ansible_python_interpreter=/usr/bin/python3\n",
    );
}

struct Run {
    ok: bool,
    out: String,
}

impl Run {
    /// The PLAY RECAP line of the node.
    fn recap(&self) -> &str {
        self.out
            .lines()
            .rfind(|l| l.contains("changed="))
            .unwrap_or_default()
    }

    fn must_pass(self, what: &str) -> Run {
        assert!(self.ok, "{what} failed:\n{}", self.out);
        println!("{what}: {}", self.recap());
        self
    }
}

fn play(m: &Machine, playbook: &str, vars: &serde_json::Value, extra: &str) -> Run {
    m.write("/root/ansible/vars.json", &vars.to_string());
    let o = m.exec(&[
        "sh",
        "-c",
        &format!(
            "cd /root/ansible && ANSIBLE_NOCOLOR=1 ANSIBLE_FORCE_COLOR=0 \
             ansible-playbook -i test-inventory.ini {playbook} -e @vars.json {extra} 2>&1"
        ),
    ]);
    Run {
        ok: o.status.success(),
        out: String::from_utf8_lossy(&o.stdout).into_owned(),
    }
}

fn http_code(m: &Machine, path: &str) -> String {
    m.sh(&format!(
        "curl -s -o /dev/null -w '%{{http_code}}' http://127.0.0.1:9470{path}"
    ))
}

fn status(m: &Machine) -> serde_json::Value {
    serde_json::from_str(&m.sh("curl -s http://127.0.0.1:9470/status"))
        .unwrap_or(serde_json::Value::Null)
}

fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

#[test]
#[ignore = "needs root, systemd-nspawn, ansible-core and the built packages: run via scripts/test.sh"]
fn role_reports_first_then_enforces_previews_and_uninstalls() {
    let deb = package("RDMA_AGENT_DEB");
    let m = Machine::boot();
    controller(&m, &[(&deb, "agent.deb")]);
    let file = serde_json::json!({"rdma_node_agent_package_file": "dist/agent.deb"});
    let before = touched(&m);
    let containerd = m.main_pid("containerd");

    // Check mode on a node without the package: the package file is not on the
    // node yet, so its install is a change to show, not a failure; nothing happens.
    let fresh = play(
        &m,
        "playbook.yml",
        &vars("report", file.clone()),
        "--check --diff",
    )
    .must_pass("check mode, no package yet");
    assert!(!fresh.recap().contains("changed=0"), "{}", fresh.out);
    assert!(!m.path("/usr/bin/rdma-node-agent").exists());
    assert!(!m.path("/etc/rdma-node-agent").exists());

    // Report first, on a node without the package: the package's own start
    // already reads the role's config, so nothing is written, nothing restarted.
    let report = play(&m, "playbook.yml", &vars("report", file.clone()), "").must_pass("report");
    assert_eq!(touched(&m), before, "report mode changed a file");
    assert_eq!(m.main_pid("containerd"), containerd, "containerd restarted");
    // The gate passed on "reconciled with this config", not on readiness: the
    // node is not converged yet (no base spec), which is reported.
    let config = std::fs::read(m.path("/etc/rdma-node-agent/config.toml")).unwrap();
    let st = status(&m);
    assert_eq!(st["mode"], "report");
    assert_eq!(st["config_sha256"], sha256_hex(&config).as_str());
    assert_eq!(http_code(&m, "/readyz"), "503");
    let readiness = report
        .out
        .lines()
        .find(|l| l.contains("\"msg\": \"not ready"))
        .unwrap_or_else(|| panic!("readiness not reported:\n{}", report.out));
    println!("report mode said: {}", readiness.trim());
    let text = String::from_utf8_lossy(&config);
    assert!(
        text.contains("[containerd]\nmemlock = \"4MiB\"")
            && text.contains("unit = \"containerd.service\""),
        "{text}"
    );

    // Check mode previews enforce with the rendered config, and changes nothing.
    let check = play(
        &m,
        "playbook.yml",
        &vars("enforce", file.clone()),
        "--check --diff",
    )
    .must_pass("check mode");
    assert!(
        check.out.contains("base_runtime_spec") && check.out.contains("+mode = \"enforce\""),
        "no plan or config diff shown:\n{}",
        check.out
    );
    println!(
        "check mode planned:\n{}",
        check
            .out
            .lines()
            .filter(|l| l.contains("base_runtime_spec") || l.contains("restart"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        std::fs::read(m.path("/etc/rdma-node-agent/config.toml")).unwrap(),
        config
    );
    assert_eq!(touched(&m), before, "check mode changed a file");
    assert_eq!(status(&m)["mode"], "report");

    // Enforce converges: ready, containerd restarted with the base spec.
    play(&m, "playbook.yml", &vars("enforce", file.clone()), "").must_pass("enforce");
    assert_eq!(http_code(&m, "/readyz"), "200");
    assert_ne!(m.main_pid("containerd"), containerd);
    assert!(
        m.read("/etc/containerd/config.toml")
            .contains("base_runtime_spec")
    );
    let again = play(&m, "playbook.yml", &vars("enforce", file.clone()), "").must_pass("again");
    assert!(again.recap().contains("changed=0"), "{}", again.out);
    let check = play(
        &m,
        "playbook.yml",
        &vars("enforce", file.clone()),
        "--check --diff",
    )
    .must_pass("check mode, converged");
    assert!(check.recap().contains("changed=0"), "{}", check.out);

    // Uninstall reverts first: a file edited by hand since the agent wrote it
    // stops the play before the package (and its ledger of originals) goes.
    let hand_edited = format!(
        "{}# edited by hand\n",
        m.read("/etc/containerd/config.toml")
    );
    m.write("/etc/containerd/config.toml", &hand_edited);
    let kept = play(&m, "uninstall.yml", &vars("enforce", file.clone()), "");
    assert!(
        !kept.ok,
        "uninstall went on past a failed revert:\n{}",
        kept.out
    );
    assert!(
        kept.out.contains("kept: /etc/containerd/config.toml"),
        "{}",
        kept.out
    );
    assert!(m.path("/usr/bin/rdma-node-agent").exists());
    assert!(m.path("/var/lib/rdma-node-agent/ledger.json").exists());
    // Then, told to, it restores that file too and removes everything.
    let force = serde_json::json!({
        "rdma_node_agent_package_file": "dist/agent.deb",
        "rdma_node_agent_revert_force": true,
    });
    play(&m, "uninstall.yml", &vars("enforce", force), "").must_pass("uninstall");
    assert_eq!(touched(&m), before, "uninstall left a file changed");
    for gone in [
        "/usr/bin/rdma-node-agent",
        "/etc/rdma-node-agent",
        "/var/lib/rdma-node-agent",
    ] {
        assert!(!m.path(gone).exists(), "{gone} left behind");
    }
    assert_eq!(m.sh("systemctl is-active containerd").trim(), "active");
    assert_eq!(
        m.sh("systemctl show -P LimitMEMLOCK containerd").trim(),
        "8388608"
    );
}

fn deb_version(deb: &Path) -> String {
    let o = Command::new("dpkg-deb")
        .arg("-f")
        .arg(deb)
        .arg("Version")
        .output()
        .unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_owned()
}

/// A deb's entry in a repository's Packages index.
fn stanza(deb: &Path) -> String {
    let o = Command::new("dpkg-deb")
        .arg("-f")
        .arg(deb)
        .output()
        .unwrap();
    assert!(o.status.success());
    let bytes = std::fs::read(deb).unwrap();
    format!(
        "{}\nFilename: ./{}\nSize: {}\nSHA256: {}\n\n",
        String::from_utf8_lossy(&o.stdout).trim_end(),
        deb.file_name().unwrap().to_string_lossy(),
        bytes.len(),
        sha256_hex(&bytes)
    )
}

#[test]
#[ignore = "needs root, systemd-nspawn, ansible-core and the built packages: run via scripts/test.sh"]
fn role_pins_a_version_from_a_repository_then_upgrades() {
    let (old, new) = (package("RDMA_AGENT_DEB"), package("RDMA_AGENT_DEB_UPGRADE"));
    let (v1, v2) = (deb_version(&old), deb_version(&new));
    assert_ne!(v1, v2);
    // Both versions in one flat repository, as a fleet's mirror holds them: its
    // index is each package's control stanza with where the file is and its digest.
    let index: String = [&old, &new].iter().map(|deb| stanza(deb)).collect();
    let m = Machine::boot();
    controller(&m, &[]);
    for deb in [&old, &new] {
        let name = deb.file_name().unwrap().to_string_lossy();
        m.install(deb, &format!("/srv/repo/{name}"), 0o644);
    }
    m.write("/srv/repo/Packages", &index);
    m.write(
        "/etc/apt/sources.list.d/local.list",
        "deb [trusted=yes] file:/srv/repo ./\n",
    );
    // Only the local list: the machine has no network.
    m.sh_ok(
        "apt-get update -qq -o Dir::Etc::sourcelist=sources.list.d/local.list \
         -o Dir::Etc::sourceparts=- -o APT::Get::List-Cleanup=0",
    );
    let installed = |m: &Machine| {
        m.sh("dpkg-query -W -f '${Version}' rdma-node-agent")
            .trim()
            .to_owned()
    };

    let pin = |v: &str| vars("report", serde_json::json!({"rdma_node_agent_version": v}));
    play(&m, "playbook.yml", &pin(&v1), "").must_pass("pinned");
    assert_eq!(installed(&m), v1, "the pin was not kept (newer: {v2})");
    let agent = m.main_pid("rdma-node-agent");
    play(&m, "playbook.yml", &pin(&v2), "").must_pass("upgrade");
    assert_eq!(installed(&m), v2);
    assert_ne!(m.main_pid("rdma-node-agent"), agent, "upgrade restarted it");
    assert_eq!(status(&m)["mode"], "report");
    let again = play(&m, "playbook.yml", &pin(&v2), "").must_pass("again");
    assert!(again.recap().contains("changed=0"), "{}", again.out);
}

/// A scraper in its own network namespace, reaching the node over a veth from
/// 10.99.0.2 or 10.99.0.3; the node is 10.99.0.1.
fn scrape(m: &Machine, from: &str) -> String {
    m.sh(&format!(
        "ip netns exec scraper curl -s --max-time 3 --interface {from} \
         -o /dev/null -w '%{{http_code}}' http://10.99.0.1:9470/metrics"
    ))
}

#[test]
#[ignore = "needs root, systemd-nspawn, ansible-core and the built packages: run via scripts/test.sh"]
fn remote_scrape_passes_the_units_ip_filter_only_from_listed_sources() {
    let deb = package("RDMA_AGENT_DEB");
    // nspawn's seccomp filter denies bpf() by default, and systemd then runs
    // every unit without its IP filter ("the local system does not support
    // BPF/cgroup firewalling"): allowed here, as on a real host.
    let m = Machine::boot_with(&["--system-call-filter=bpf"]);
    controller(&m, &[(&deb, "agent.deb")]);
    m.sh_ok(
        "ip netns add scraper && ip link add veth0 type veth peer name veth1 && \
         ip link set veth1 netns scraper && ip addr add 10.99.0.1/24 dev veth0 && \
         ip link set veth0 up && ip netns exec scraper ip link set lo up && \
         ip netns exec scraper ip addr add 10.99.0.2/24 dev veth1 && \
         ip netns exec scraper ip addr add 10.99.0.3/24 dev veth1 && \
         ip netns exec scraper ip link set veth1 up",
    );
    let remote = |sources: serde_json::Value| {
        vars(
            "report",
            serde_json::json!({
                "rdma_node_agent_package_file": "dist/agent.deb",
                "rdma_node_agent_listen": "0.0.0.0:9470",
                "rdma_node_agent_scrape_sources": sources,
            }),
        )
    };

    // A listen address nobody may reach is refused, naming the variable.
    let refused = play(&m, "playbook.yml", &remote(serde_json::json!([])), "");
    assert!(!refused.ok, "{}", refused.out);
    assert!(
        refused.out.contains("rdma_node_agent_scrape_sources"),
        "{}",
        refused.out
    );

    play(
        &m,
        "playbook.yml",
        &remote(serde_json::json!(["10.99.0.2"])),
        "",
    )
    .must_pass("with a scrape source");
    assert_eq!(
        scrape(&m, "10.99.0.2"),
        "200",
        "the listed source is dropped"
    );
    assert_ne!(
        scrape(&m, "10.99.0.3"),
        "200",
        "an unlisted source got through"
    );
    let body = m.sh(
        "ip netns exec scraper curl -s --max-time 3 --interface 10.99.0.2 http://10.99.0.1:9470/metrics",
    );
    assert!(body.contains("rdma_node_agent_ready "), "{body}");
    assert_eq!(http_code(&m, "/healthz"), "200", "localhost still allowed");

    // Without the drop-in the unit's own filter drops the same source: the
    // allow above is the drop-in's doing, and the filter works on this machine.
    m.sh_ok(
        "rm /etc/systemd/system/rdma-node-agent.service.d/60-remote-scrape.conf && \
         systemctl daemon-reload && systemctl restart rdma-node-agent",
    );
    m.wait("/healthz 200", Duration::from_secs(30), |m| {
        http_code(m, "/healthz") == "200"
    });
    assert_ne!(
        scrape(&m, "10.99.0.2"),
        "200",
        "the unit's IPAddressDeny=any did not drop a remote scrape"
    );
}
