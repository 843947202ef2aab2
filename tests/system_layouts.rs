//! Every containerd layout the README lists, as installed: the agent under the
//! shipped unit (ProtectSystem=strict) on real systemd (PID 1 in nspawn), with
//! the machine's real containerd run as each layout runs its own: microk8s's
//! snap service on `/var/snap/microk8s/<rev>/args`, k3s and rke2 (with and
//! without `/etc/containerd`) regenerating config.toml from its template at
//! each start, and a config linked into `/opt`. The containerd and ctr are where
//! each layout bundles them, and not on PATH.
//!
//! Each must converge under the unit: containerd's CRI gives every handler the
//! base spec, the unit stays active with NRestarts=0, and no file is left
//! half-written (no temp file, no config naming a missing spec).
//!
//! The layouts' units below are hand-written stand-ins (labelled so): they run
//! the real containerd with the config path, socket and template step of the
//! layout; the configs are the real ones of tests/fixtures/real-world (see
//! each PROVENANCE).

mod support;

use std::path::Path;
use std::time::Duration;

use support::nspawn::Machine;
use support::service::{install_agent, status, status_check};

/// Short cycles; memlock below the CI machines' hard limit (8 MiB).
const AGENT: &str = "[containerd]\nmemlock = \"4MiB\"\n\n[systemd]\nmemlock = \"4MiB\"\n\n[daemon]\ninterval_secs = 2\nrestart_timeout_secs = 30\n";

fn fixture(case: &str, file: &str) -> String {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/real-world")
        .join(case)
        .join("root")
        .join(file.trim_start_matches('/'));
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Moves the machine's containerd and ctr to where a layout bundles them, so
/// that neither is on PATH (as on a microk8s or k3s node), and stops the
/// distribution's containerd.service.
fn bundle(m: &Machine, bin_dir: &str) {
    m.sh_ok(&format!(
        "systemctl disable --now containerd.service && mkdir -p {bin_dir} \
         && mv /usr/bin/containerd /usr/bin/ctr {bin_dir}/ \
         && ! command -v ctr && ! command -v containerd"
    ));
}

/// `ActiveState` and `NRestarts` of the agent's unit.
fn agent_unit(m: &Machine) -> (String, u32) {
    let out = m.sh_ok("systemctl show -P ActiveState rdma-node-agent; systemctl show -P NRestarts rdma-node-agent");
    let mut l = out.lines();
    let state = l.next().unwrap_or_default().to_owned();
    let restarts = l
        .next()
        .unwrap_or_default()
        .trim()
        .parse()
        .unwrap_or(u32::MAX);
    (state, restarts)
}

/// Files the agent left behind mid-write in these directories.
fn temp_files(m: &Machine, dirs: &[&str]) -> String {
    m.sh(&format!(
        "find {} -name '.*.rdma-node-agent.*' 2>/dev/null",
        dirs.join(" ")
    ))
}

/// The CRI row of `ctr plugins ls`, asked with the layout's own ctr.
fn cri(m: &Machine, ctr: &str, socket: &str) -> String {
    m.sh(&format!(
        "{ctr} --address {socket} plugins ls 2>/dev/null | awk '$1==\"io.containerd.grpc.v1\" && $2==\"cri\" {{print $NF}}'"
    ))
    .trim()
    .to_owned()
}

/// Starts the agent and waits for `containerd.memlock` to be ok; then checks
/// the unit, the files and containerd's CRI.
fn converges(m: &Machine, layout: &Layout) {
    install_agent(m, AGENT);
    m.sh_ok("systemctl start rdma-node-agent");
    m.wait(
        &format!("{}: containerd.memlock ok", layout.name),
        Duration::from_secs(120),
        |m| status_check(m, "containerd.memlock")["status"] == "ok",
    );
    let s = status(m);
    let journal = m.journal("rdma-node-agent");
    assert!(
        !journal.contains("Read-only file system") || journal.contains("restarting"),
        "{}: a read-only write not acted on:\n{journal}",
        layout.name
    );
    let (state, restarts) = agent_unit(m);
    assert_eq!(
        (state.as_str(), restarts),
        ("active", 0),
        "{}: {s}\n{journal}",
        layout.name
    );
    let config = m.read(layout.config);
    assert!(
        config.contains(&format!("base_runtime_spec = \"{}\"", layout.spec)),
        "{}: {config}",
        layout.name
    );
    let spec = m.read(layout.spec);
    assert!(spec.contains("RLIMIT_MEMLOCK"), "{}: {spec:?}", layout.name);
    if let Some(t) = layout.template {
        assert!(
            m.read(t).contains(layout.spec),
            "{}: the template keeps the spec across the next regeneration",
            layout.name
        );
    }
    assert_eq!(cri(m, layout.ctr, layout.socket), "ok", "{}", layout.name);
    assert_eq!(temp_files(m, layout.dirs), "", "{}", layout.name);
}

struct Layout<'a> {
    name: &'a str,
    config: &'a str,
    template: Option<&'a str>,
    spec: &'a str,
    ctr: &'a str,
    socket: &'a str,
    /// Where the agent writes (searched for temp files).
    dirs: &'a [&'a str],
}

/// microk8s: revision 7229 behind `current`, the template rendered by sed at
/// each start as microk8s's run-containerd-with-args does (a stand-in unit).
#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn microk8s_converges_under_the_unit() {
    let m = Machine::boot();
    bundle(&m, "/snap/microk8s/7229/bin");
    let args = "/var/snap/microk8s/7229/args";
    m.write(
        &format!("{args}/containerd-template.toml"),
        &fixture(
            "microk8s",
            "/var/snap/microk8s/7229/args/containerd-template.toml",
        ),
    );
    m.sh_ok(
        "ln -s 7229 /var/snap/microk8s/current && ln -s 7229 /snap/microk8s/current \
         && mkdir -p /var/snap/microk8s/common/run",
    );
    // Hand-written stand-in for snap.microk8s.daemon-containerd.service: the
    // template rendered by sed at each start, as run-containerd-with-args does.
    m.write(
        "/usr/local/bin/microk8s-render",
        "#!/bin/sh\nset -e\nSNAP=/snap/microk8s/7229 SNAP_DATA=/var/snap/microk8s/7229\n\
         sed \"s@\\${SNAP}@$SNAP@g;s@\\${SNAP_DATA}@$SNAP_DATA@g;s@\\${SNAPSHOTTER}@overlayfs@g;s@\\${RUNTIME}@runc@g;s@\\${RUNTIME_TYPE}@io.containerd.runc.v2@g\" \\\n\
         $SNAP_DATA/args/containerd-template.toml > $SNAP_DATA/args/containerd.toml\n",
    );
    m.sh_ok("chmod 755 /usr/local/bin/microk8s-render");
    m.write(
        "/etc/systemd/system/snap.microk8s.daemon-containerd.service",
        "[Unit]\nDescription=stand-in for microk8s's containerd\n[Service]\nType=notify\n\
         ExecStartPre=/usr/local/bin/microk8s-render\n\
         ExecStart=/snap/microk8s/current/bin/containerd --config /var/snap/microk8s/current/args/containerd.toml --address /var/snap/microk8s/common/run/containerd.sock --root /var/snap/microk8s/common/var/lib/containerd --state /var/snap/microk8s/common/run/containerd\n\
         KillMode=process\nDelegate=yes\n[Install]\nWantedBy=multi-user.target\n",
    );
    m.sh_ok("systemctl daemon-reload && systemctl enable --now snap.microk8s.daemon-containerd");
    converges(
        &m,
        &Layout {
            name: "microk8s",
            config: "/var/snap/microk8s/current/args/containerd.toml",
            template: Some("/var/snap/microk8s/current/args/containerd-template.toml"),
            spec: "/var/snap/microk8s/current/args/rdma-node-agent/base-spec.json",
            ctr: "/snap/microk8s/current/bin/ctr",
            socket: "/var/snap/microk8s/common/run/containerd.sock",
            dirs: &[args],
        },
    );
    // The agent granted its unit exactly the revision's args directory.
    let dropin =
        m.read("/etc/systemd/system/rdma-node-agent.service.d/50-rdma-node-agent-paths.conf");
    assert!(
        dropin.contains(&format!("ReadWritePaths=-{args}\n")),
        "{dropin}"
    );
    assert_eq!(dropin.matches("ReadWritePaths=").count(), 1, "{dropin}");
    // microk8s regenerates its config from the template: still prepared.
    m.sh_ok("systemctl restart snap.microk8s.daemon-containerd");
    assert!(
        m.read("/var/snap/microk8s/current/args/containerd.toml")
            .contains("rdma-node-agent/base-spec.json")
    );
    assert_eq!(agent_unit(&m), ("active".to_owned(), 0));
}

/// A k3s or rke2 node: its containerd (bundled, not on PATH) run by a
/// stand-in unit that regenerates config.toml from the template at each start.
/// Returns the config directory and the bundled binaries' directory.
fn rancher_node(
    m: &Machine,
    distro: &str,
    unit: &str,
    keep_etc_containerd: bool,
) -> (String, &'static str) {
    let (case, bin) = match distro {
        "k3s" => ("k3s", "/var/lib/rancher/k3s/data/abc123/bin"),
        _ => ("rke2-server", "/var/lib/rancher/rke2/bin"),
    };
    bundle(m, bin);
    if distro == "k3s" {
        m.sh_ok("ln -s abc123 /var/lib/rancher/k3s/data/current");
    }
    if !keep_etc_containerd {
        m.sh_ok("rm -rf /etc/containerd");
    }
    let dir = format!("/var/lib/rancher/{distro}/agent/etc/containerd");
    for f in ["config.toml", "config.toml.tmpl"] {
        m.write(&format!("{dir}/{f}"), &fixture(case, &format!("{dir}/{f}")));
    }
    let bin_current = if distro == "k3s" {
        "/var/lib/rancher/k3s/data/current/bin"
    } else {
        bin
    };
    m.write(
        &format!("/etc/systemd/system/{unit}"),
        &format!(
            "[Unit]\nDescription=stand-in for {distro}'s containerd\n[Service]\nType=notify\n\
             ExecStartPre=/bin/cp {dir}/config.toml.tmpl {dir}/config.toml\n\
             ExecStart={bin_current}/containerd --config {dir}/config.toml --address /run/k3s/containerd/containerd.sock --root /var/lib/rancher/{distro}/agent/containerd --state /run/k3s/containerd\n\
             KillMode=process\nDelegate=yes\n[Install]\nWantedBy=multi-user.target\n"
        ),
    );
    m.sh_ok(&format!(
        "systemctl daemon-reload && systemctl enable --now {unit}"
    ));
    (dir, bin_current)
}

/// k3s or rke2 converge under the unit, and the next regeneration of the
/// config from its template keeps CRI loading.
fn rancher(distro: &'static str, unit: &str, keep_etc_containerd: bool) {
    let m = Machine::boot();
    let (dir, bin_current) = rancher_node(&m, distro, unit, keep_etc_containerd);
    let spec = format!("{dir}/rdma-node-agent/base-spec.json");
    let config = format!("{dir}/config.toml");
    let template = format!("{dir}/config.toml.tmpl");
    let ctr = format!("{bin_current}/ctr");
    converges(
        &m,
        &Layout {
            name: distro,
            config: &config,
            template: Some(&template),
            spec: &spec,
            ctr: &ctr,
            socket: "/run/k3s/containerd/containerd.sock",
            dirs: &[&dir],
        },
    );
    // The next start regenerates config.toml from the template: CRI still loads.
    m.sh_ok(&format!("systemctl restart {unit}"));
    m.wait("CRI after the regeneration", Duration::from_secs(30), |m| {
        cri(m, &ctr, "/run/k3s/containerd/containerd.sock") == "ok"
    });
    assert!(m.read(&config).contains(&spec));
    assert!(
        !m.read(&config).contains("\"/etc/containerd/"),
        "no config names a file under /etc/containerd"
    );
    // Nothing needed granting: the unit already lists the layout's directory.
    assert_eq!(
        m.sh("ls /etc/systemd/system/rdma-node-agent.service.d/ 2>/dev/null"),
        ""
    );
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn k3s_without_etc_containerd_converges_under_the_unit() {
    rancher("k3s", "k3s.service", false);
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn k3s_with_etc_containerd_converges_under_the_unit() {
    rancher("k3s", "k3s.service", true);
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn rke2_without_etc_containerd_converges_under_the_unit() {
    rancher("rke2", "rke2-server.service", false);
}

#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn rke2_with_etc_containerd_converges_under_the_unit() {
    rancher("rke2", "rke2-server.service", true);
}

/// The distribution's containerd with its config a link into /opt (a config
/// management tree): the link stays, the file is written where it leads, and
/// the agent grants its unit that directory.
#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn a_config_linked_into_opt_converges_under_the_unit() {
    let m = Machine::boot();
    m.sh_ok(
        "mkdir -p /opt/cm/containerd && printf 'version = 2\\n' > /opt/cm/containerd/config.toml \
         && rm -f /etc/containerd/config.toml \
         && ln -s /opt/cm/containerd/config.toml /etc/containerd/config.toml \
         && systemctl restart containerd",
    );
    converges(
        &m,
        &Layout {
            name: "link into /opt",
            config: "/opt/cm/containerd/config.toml",
            template: None,
            spec: "/etc/containerd/rdma-node-agent/base-spec.json",
            ctr: "ctr",
            socket: "/run/containerd/containerd.sock",
            dirs: &["/opt/cm/containerd", "/etc/containerd"],
        },
    );
    assert_eq!(
        m.sh_ok("readlink /etc/containerd/config.toml").trim(),
        "/opt/cm/containerd/config.toml"
    );
    let dropin =
        m.read("/etc/systemd/system/rdma-node-agent.service.d/50-rdma-node-agent-paths.conf");
    assert!(
        dropin.contains("ReadWritePaths=-/opt/cm/containerd\n"),
        "{dropin}"
    );
}

/// The default layout: nothing to grant, nothing restarted but containerd.
#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn default_containerd_converges_under_the_unit() {
    let m = Machine::boot();
    m.write("/etc/containerd/config.toml", "version = 2\n");
    m.sh_ok("systemctl restart containerd");
    converges(
        &m,
        &Layout {
            name: "containerd.service",
            config: "/etc/containerd/config.toml",
            template: None,
            spec: "/etc/containerd/rdma-node-agent/base-spec.json",
            ctr: "ctr",
            socket: "/run/containerd/containerd.sock",
            dirs: &["/etc/containerd"],
        },
    );
    assert_eq!(
        m.sh("ls /etc/systemd/system/rdma-node-agent.service.d/ 2>/dev/null"),
        ""
    );
}

/// The worst case: k3s without /etc/containerd and a base spec the
/// unit cannot create (here an operator's `base_spec_path` in a directory
/// under /etc that does not exist; before, the default one). The change is
/// written whole or not at all: the config and template keep their bytes (no
/// config names the missing spec, so a k3s restart still loads CRI), the check
/// says `path_not_writable` and why, no grant as wide as /etc is made, and the
/// daemon keeps serving: active, NRestarts=0, cycle after cycle.
#[test]
#[ignore = "needs root, systemd-nspawn and a Debian mirror: run via scripts/test.sh"]
fn a_spec_the_unit_cannot_create_is_said_and_nothing_is_half_written() {
    let m = Machine::boot();
    let (dir, bin_current) = rancher_node(&m, "k3s", "k3s.service", false);
    let config = format!("{dir}/config.toml");
    let template = format!("{dir}/config.toml.tmpl");
    let before = (m.read(&config), m.read(&template));
    install_agent(
        &m,
        &AGENT.replace(
            "[containerd]\n",
            "[containerd]\nbase_spec_path = \"/etc/rdma-spec/base-spec.json\"\n",
        ),
    );
    m.sh_ok("systemctl start rdma-node-agent");
    m.wait(
        "containerd.memlock says path_not_writable",
        Duration::from_secs(60),
        |m| status_check(m, "containerd.memlock")["reason"] == "path_not_writable",
    );
    // Several cycles go by (interval 2 s): each says it, none restarts anything.
    std::thread::sleep(Duration::from_secs(8));
    let s = status(&m);
    let cm = status_check(&m, "containerd.memlock");
    assert_eq!(cm["status"], "fail", "{s}");
    assert_eq!(cm["reason"], "path_not_writable", "{s}");
    let message = cm["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("Read-only file system") && message.contains("nothing was written"),
        "{message}"
    );
    assert!(
        message.contains("/etc is read-only to rdma-node-agent.service"),
        "{message}"
    );
    assert_eq!(agent_unit(&m), ("active".to_owned(), 0), "{s}");
    assert_eq!((m.read(&config), m.read(&template)), before, "{s}");
    assert_eq!(temp_files(&m, &[&dir, "/etc"]), "");
    assert!(!m.root_path("/etc/rdma-spec").exists());
    assert_eq!(
        m.sh("ls /etc/systemd/system/rdma-node-agent.service.d/ 2>/dev/null"),
        "",
        "no grant of /etc"
    );
    // k3s restarts: its config names nothing missing, CRI loads.
    m.sh_ok("systemctl restart k3s");
    m.wait("CRI after a k3s restart", Duration::from_secs(30), |m| {
        cri(
            m,
            &format!("{bin_current}/ctr"),
            "/run/k3s/containerd/containerd.sock",
        ) == "ok"
    });
}
