use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};

use rdma_node_agent::agent::Agent;
use rdma_node_agent::concerns;
use rdma_node_agent::concerns::registry::SECTIONS;
use rdma_node_agent::config::{self, Config};
use rdma_node_agent::engine::check::{EXIT_UNKNOWN, Report};
use rdma_node_agent::host::Host;
use rdma_node_agent::host::snapshot::Snapshot;
use rdma_node_agent::selftest;

/// Prepares a Kubernetes node's host for RDMA workloads and reports its RDMA health.
#[derive(Parser)]
#[command(version, about)]
struct Cli {
    /// Act on the tree under DIR instead of the live host (like `systemctl --root`).
    #[arg(long, global = true, default_value = "/", value_name = "DIR")]
    root: PathBuf,
    /// The agent's config, resolved under --root [default: /etc/rdma-node-agent/config.toml,
    /// which may be absent (built-in defaults); a FILE given here must exist].
    #[arg(long, global = true, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum GateAction {
    /// Close the gate (after a repair): the node reports not ready for RDMA jobs until the
    /// loopback selftest and a round of peer probes pass again. Asks the running daemon
    /// (a request file it watches), which keeps the gate's state.
    Reset,
}

#[derive(Subcommand)]
enum Command {
    /// Read-only checks. Exit 0 ok, 1 a check failed, 2 could not tell (node-problem-detector's convention).
    Check {
        #[arg(long)]
        json: bool,
        /// Report only this check (repeatable), e.g. for one node-problem-detector rule per check.
        #[arg(long, value_name = "ID")]
        only: Vec<String>,
    },
    /// Show what `apply` would change, files as unified diffs.
    Plan {
        #[arg(long)]
        json: bool,
        /// Exit 2 when there are changes (0 when converged).
        #[arg(long)]
        exit_code: bool,
    },
    /// Converge the host; a second run changes nothing.
    ///
    /// Exit 0 converged, 1 nothing applied (an error, or rolled back), 2 applied but an action
    /// is pending (a reboot, or a restart systemd could not be asked for), 3 applied but a live
    /// action failed (named on stderr).
    Apply {
        #[arg(long)]
        json: bool,
        /// Change files only; leave restarts for later.
        #[arg(long)]
        no_restart: bool,
    },
    /// Run as a daemon: keep the node converged (or only report, with mode = "report")
    /// and serve /healthz, /readyz, /status and /metrics.
    Serve {
        /// Where the health endpoint listens (`host:port` or `unix:/path`); default from the config.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// Ask the running daemon for its last report (the same checks as `check`).
    Status {
        #[arg(long)]
        json: bool,
        /// The daemon's endpoint; default from the config.
        #[arg(long, value_name = "ADDR")]
        listen: Option<String>,
    },
    /// For each ACTIVE RDMA port, perftest's ib_write_bw loopback with the memlock pods get
    /// (and no CAP_IPC_LOCK), then with 64 KiB as a control; the bandwidth against the port's
    /// rate. Exit 0 every port passed, 1 one failed, 2 nothing could be tested (no RDMA,
    /// no ACTIVE port, no perftest). Its verdict is kept for the return-to-service gate.
    Selftest {
        /// Only this RDMA device's ports (e.g. mlx5_0).
        #[arg(long, value_name = "DEVICE")]
        device: Option<String>,
        /// Message size in bytes.
        #[arg(long, default_value_t = 1 << 20, value_name = "BYTES")]
        size: u64,
        #[arg(long)]
        json: bool,
        /// The share of the port's rate the average must reach.
        #[arg(long, default_value_t = 80.0, value_name = "PERCENT")]
        min_percent: f64,
        /// Skip the low-memlock control run.
        #[arg(long)]
        no_control: bool,
    },
    Fleet(rdma_node_agent::fleetview::cli::FleetArgs),
    /// The return-to-service gate (`[peers] gate = true`).
    Gate {
        #[command(subcommand)]
        action: GateAction,
    },
    /// The privileged helper systemd runs for the daemon (PCI config space).
    #[command(hide = true)]
    PciConfig(rdma_node_agent::host::pci_helper::Args),
    /// The privileged helper systemd runs for the daemon (the kernel log).
    #[command(hide = true)]
    KernelLog(rdma_node_agent::host::kmsg_helper::Args),
    /// Write the man page and shell completions generated from this CLI into DIR (for packaging).
    #[command(hide = true)]
    GenerateAssets {
        dir: PathBuf,
    },
    /// Restore every file the agent changed to its original bytes and remove what it created.
    Revert {
        #[arg(long)]
        json: bool,
        /// Also restore files that were edited by someone else since the agent wrote them.
        #[arg(long)]
        force: bool,
    },
}

impl Cli {
    fn config_path(&self) -> PathBuf {
        self.config
            .clone()
            .unwrap_or_else(|| config::DEFAULT_PATH.into())
    }

    /// Only the default config may be absent: a file named on the command line
    /// that is not there is a typo, not a request for the defaults.
    fn check_config_exists(&self, host: &Host) -> anyhow::Result<()> {
        match &self.config {
            Some(p) if !host.exists(p) => anyhow::bail!(
                "config file {} does not exist (only the default {} may be absent); \
                 check the path given to --config",
                host.path(p).display(),
                config::DEFAULT_PATH
            ),
            _ => Ok(()),
        }
    }
}

fn load(cli: &Cli) -> anyhow::Result<Agent> {
    let host = Host::new(&cli.root);
    cli.check_config_exists(&host)?;
    let config =
        Config::load(&host, &cli.config_path(), SECTIONS).context("invalid agent config")?;
    // Live actions (systemd, netlink) only on the host itself, like `systemctl --root`.
    Ok(if cli.root == std::path::Path::new("/") {
        Agent::live(host, config)
    } else {
        Agent::new(host, config)
    })
}

/// One write for the whole document: stdout is line-buffered, and a report of
/// 1024 devices is thousands of lines.
fn print_json(v: &impl serde::Serialize) {
    let mut buf = serde_json::to_vec_pretty(v).unwrap_or_default();
    buf.push(b'\n');
    let _ = std::io::stdout().lock().write_all(&buf);
}

fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match &cli.command {
        Command::Check { json, only } => check(&cli, *json, only),
        Command::Plan { json, exit_code } => {
            let plan = load(&cli)?.plan().context("cannot plan")?;
            if *json {
                print_json(&plan.to_json());
            } else {
                print!("{}", plan.to_text());
            }
            Ok(if *exit_code && !plan.is_empty() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            })
        }
        Command::Apply { json, no_restart } => apply(&cli, *json, *no_restart),
        Command::GenerateAssets { dir } => {
            generate_assets(dir)?;
            Ok(ExitCode::SUCCESS)
        }
        Command::Fleet(args) => Ok(ExitCode::from(rdma_node_agent::fleetview::cli::run(args))),
        Command::PciConfig(args) => Ok(rdma_node_agent::host::pci_helper::main(&cli.root, args)),
        Command::KernelLog(args) => Ok(rdma_node_agent::host::kmsg_helper::main(&cli.root, args)),
        Command::Status { json, listen } => status(&cli, *json, listen.as_deref()),
        Command::Selftest {
            device,
            size,
            json,
            min_percent,
            no_control,
        } => selftest(
            &cli,
            device.as_deref(),
            *size,
            *json,
            *min_percent,
            !no_control,
        ),
        Command::Gate {
            action: GateAction::Reset,
        } => {
            let host = Host::new(&cli.root);
            let config = Config::load(&host, &cli.config_path(), SECTIONS)
                .context("invalid agent config")?;
            let peers = config.section::<concerns::rdma::peers::config::PeersConfig>();
            if !(peers.enabled && peers.gate) {
                anyhow::bail!(
                    "the return-to-service gate is off ([peers] enabled and gate = true in {}): nothing to reset",
                    cli.config_path().display()
                );
            }
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs());
            let said = rdma_node_agent::concerns::rdma::peers::gate_reset::reset(
                &host,
                rdma_node_agent::daemon::DAEMON_LOCK,
                now,
            )
            .map_err(anyhow::Error::msg)?;
            println!("{said}");
            Ok(ExitCode::SUCCESS)
        }
        Command::Serve { listen } => serve(&cli, listen),
        Command::Revert { json, force } => revert(&cli, *json, *force),
    }
}

/// `check`: the report, and an exit code node-problem-detector reads.
fn check(cli: &Cli, json: bool, only: &[String]) -> anyhow::Result<ExitCode> {
    let agent = match load(cli) {
        Ok(a) => a,
        Err(e) => {
            // First line stays a short summary for node-problem-detector.
            println!("rdma-node-agent cannot check: its config is invalid or missing");
            eprintln!("error: {e:#}");
            return Ok(ExitCode::from(EXIT_UNKNOWN as u8));
        }
    };
    let known: Vec<&str> = concerns::ALL
        .iter()
        .flat_map(|c| c.ids())
        .map(|id| id.as_str())
        .collect();
    if let Some(unknown) = only.iter().find(|id| !known.contains(&id.as_str())) {
        println!("rdma-node-agent: no check named {unknown}");
        eprintln!("known checks: {}", known.join(", "));
        return Ok(ExitCode::from(EXIT_UNKNOWN as u8));
    }
    // Only the concerns those checks need run; report only the checks asked for.
    let mut report: Report = agent.check(only);
    if !only.is_empty() {
        report.checks.retain(|c| only.contains(&c.id));
        report = Report::new(report.checks);
    }
    if json {
        print_json(&report);
    } else {
        print!("{}", report.to_text());
    }
    Ok(ExitCode::from(report.exit_code() as u8))
}

fn apply(cli: &Cli, json: bool, no_restart: bool) -> anyhow::Result<ExitCode> {
    use rdma_node_agent::engine::outcome::{ActionStatus, apply_exit_code};
    let out = load(cli)?.apply(!no_restart).context("apply failed")?;
    if json {
        print_json(&out);
    } else if out.changed.is_empty() && out.actions.is_empty() {
        println!("No changes: the node is converged.");
    } else {
        for p in &out.changed {
            println!("changed: {}", p.display());
        }
        for a in &out.actions {
            println!("{}: {}: {}", a.status, a.action, a.detail);
        }
    }
    for n in &out.notes {
        eprintln!("note: {n}");
    }
    for a in &out.actions {
        match a.status {
            ActionStatus::Done | ActionStatus::Skipped => {}
            ActionStatus::Pending => eprintln!("pending: {}: {}", a.action, a.detail),
            s => eprintln!("error: {} {s}: {}", a.action, a.detail),
        }
    }
    Ok(ExitCode::from(apply_exit_code(&out.actions)))
}

fn serve(cli: &Cli, listen: &Option<String>) -> anyhow::Result<ExitCode> {
    cli.check_config_exists(&Host::new(&cli.root))?;
    let daemon =
        rdma_node_agent::daemon::Daemon::new(cli.root.clone(), cli.config_path(), listen.clone());
    // One thread serves every request from cached bytes; reconciles run on
    // their own thread, so a slow one never delays a probe. The runtime is
    // the process's one (D-Bus and CRI clients use it too) and is never
    // dropped: a reconcile that did not return after SIGTERM is not
    // waited for, its writes are atomic and the stop budget is short.
    let rt = rdma_node_agent::host::rt::shared().map_err(anyhow::Error::msg)?;
    rt.block_on(daemon.run())?;
    Ok(ExitCode::SUCCESS)
}

fn revert(cli: &Cli, json: bool, force: bool) -> anyhow::Result<ExitCode> {
    let result = load(cli)?.revert(force).context("revert failed")?;
    let out = &result.files;
    if json {
        print_json(&result);
    } else {
        for p in &out.restored {
            println!("restored: {}", p.display());
        }
        for p in &out.removed {
            println!("removed: {}", p.display());
        }
        for (p, why) in &out.kept {
            println!("kept: {}: {why}", p.display());
        }
        if out.restored.is_empty() && out.removed.is_empty() && out.kept.is_empty() {
            println!("Nothing to revert: the agent has changed no file.");
        }
        for a in &result.actions {
            println!("{}: {}: {}", a.status, a.action, a.detail);
        }
    }
    let failed = result
        .actions
        .iter()
        .any(|a| a.status == rdma_node_agent::engine::outcome::ActionStatus::Failed);
    Ok(if out.kept.is_empty() && !failed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// Asks the daemon over loopback HTTP and prints its report like `check` does,
/// with the same exit codes.
fn status(cli: &Cli, json: bool, listen: Option<&str>) -> anyhow::Result<ExitCode> {
    let host = Host::new(&cli.root);
    cli.check_config_exists(&host)?;
    // A config that does not load cannot say where the daemon listens.
    let addr = match listen {
        Some(l) => l.to_owned(),
        None => {
            Config::load(&host, &cli.config_path(), SECTIONS)
                .context(
                    "invalid agent config: cannot tell where the daemon listens (fix it, or pass --listen)",
                )?
                .http
                .listen
        }
    };
    if addr.starts_with("unix:") {
        anyhow::bail!("status speaks TCP only; query {addr} with `curl --unix-socket`");
    }
    let url = format!("http://{addr}/status");
    let client = rdma_node_agent::host::http_client::blocking_builder()
        .timeout(std::time::Duration::from_secs(5))
        .build()?;
    let resp = client.get(&url).send().with_context(|| {
        format!("no rdma-node-agent daemon answers at {addr} (is the service running? `systemctl status rdma-node-agent`)")
    })?;
    let body: serde_json::Value = resp
        .json()
        .with_context(|| format!("{url} did not answer with JSON"))?;
    if let Some(e) = body.get("error").and_then(|e| e.as_str()) {
        println!("rdma-node-agent daemon: {}", e.lines().next().unwrap_or(e));
    }
    let Some(report) = body
        .get("checks")
        .map(|_| serde_json::from_value::<Report>(body.clone()))
        .transpose()
        .context("the daemon's report is not in the expected form")?
    else {
        return Ok(ExitCode::from(EXIT_UNKNOWN as u8));
    };
    if json {
        print_json(&body);
    } else {
        print!("{}", report.to_text());
    }
    Ok(ExitCode::from(report.exit_code() as u8))
}

/// Runs the loopback test on this machine's ports (read under --root, so tests can
/// give it a sysfs tree; perftest always runs here).
fn selftest(
    cli: &Cli,
    device: Option<&str>,
    size: u64,
    json: bool,
    min_percent: f64,
    control: bool,
) -> anyhow::Result<ExitCode> {
    use rdma_node_agent::concerns::rdma::devices;
    use rdma_node_agent::selftest::{Report, run::Perftest, run::find_program};
    let host = Host::new(&cli.root);
    cli.check_config_exists(&host)?;
    let config =
        Config::load(&host, &cli.config_path(), SECTIONS).context("invalid agent config")?;
    let snap = Snapshot::new(host.clone());
    let devs = devices::gather(&snap).context("cannot read the RDMA devices")?;
    let report = match selftest::targets(&devs, device) {
        Err(why) => Report::unable(why),
        Ok(targets) => match (find_program("ib_write_bw"), find_program("prlimit")) {
            (None, _) => Report::unable(selftest::MISSING_PERFTEST.to_owned()),
            (_, None) => Report::unable("prlimit not found: install util-linux".to_owned()),
            (Some(binary), Some(prlimit)) => {
                // The test runs here, whatever --root says: this process's own caps.
                let status = std::fs::read_to_string("/proc/self/status").context(
                    "cannot read /proc/self/status to tell whether CAP_IPC_LOCK must be dropped",
                )?;
                let root = selftest::children_keep_ipc_lock(&status).map_err(anyhow::Error::msg)?;
                let setpriv = find_program("setpriv");
                if root && setpriv.is_none() {
                    Report::unable("setpriv not found (util-linux): without it the test would keep CAP_IPC_LOCK, which bypasses the memlock under test".to_owned())
                } else {
                    let runner = Perftest {
                        binary,
                        prlimit,
                        setpriv: setpriv.filter(|_| root),
                        rlimits: config
                            .containerd
                            .rlimits
                            .iter()
                            .map(|(k, v)| {
                                let name = k.as_str().trim_start_matches("RLIMIT_");
                                (name.to_ascii_lowercase(), *v)
                            })
                            .collect(),
                        timeout: std::time::Duration::from_secs(60),
                    };
                    let options = selftest::Options {
                        size,
                        memlock: config.containerd.memlock,
                        min_percent,
                        control,
                    };
                    selftest::run(&targets, &runner, &options)
                }
            }
        },
    };
    if json {
        print_json(&report);
    } else {
        print!("{}", report.to_text());
    }
    keep_selftest_verdict(&host, &snap, &report);
    Ok(ExitCode::from(report.exit_code as u8))
}

/// The verdict is agent state the return-to-service gate waits on; a
/// failure to keep it is a warning (the test itself ran).
fn keep_selftest_verdict(host: &Host, snap: &Snapshot, report: &selftest::Report) {
    use rdma_node_agent::concerns::rdma::peers::selftest_record::{self as record, SelftestRecord};
    use rdma_node_agent::host::state_writer::{Access, StateWriter};
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let kept = SelftestRecord {
        boot_id: snap.boot_id().unwrap_or_default(),
        finished_unix: now,
        // "Could not test" (exit 2) proves nothing either.
        passed: report.ok && report.exit_code == selftest::EXIT_PASS,
        summary: report.summary.clone(),
    };
    if let Err(e) = StateWriter::new(host).keep(&kept.record(), Access::Public) {
        eprintln!(
            "warning: cannot record the selftest's verdict for the gate ({}): {e}",
            record::FILE
        );
    }
}

/// The man pages (rdma-node-agent.8 and one per subcommand) and bash, zsh and
/// fish completions.
fn generate_assets(dir: &std::path::Path) -> anyhow::Result<()> {
    use clap::CommandFactory;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    let cmd = Cli::command().name("rdma-node-agent");
    let assets = rdma_node_agent::outputs::assets::render(cmd, "rdma-node-agent")
        .context("cannot render the man pages")?;
    for (name, bytes) in assets {
        let path = dir.join(name);
        std::fs::write(&path, bytes).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    rdma_node_agent::logging::init(matches!(cli.command, Command::Serve { .. }));
    match run(cli) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
