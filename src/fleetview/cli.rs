//! The `fleet` subcommand's options and its run: ask, analyse, print, exit.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use super::{EXIT_CANNOT_ASK, Report, Settings, analyse, ask, duration, render};
use crate::host::prometheus::{Auth, Options, Prometheus, Secret};

/// Ask Prometheus which nodes cannot run RDMA jobs and why, and which differ from their peers.
///
/// Instant queries of the agents' own series, on Prometheus, Thanos Query or Mimir.
/// Exit 0 every node fine, 1 a node is not, 2 Prometheus could not be asked or
/// scrapes no agent. --root and --config do not apply.
#[derive(clap::Args, Debug)]
pub struct FleetArgs {
    /// The query API's base URL: Prometheus, Thanos Query, or Mimir with its
    /// prefix (e.g. https://mimir.example/prometheus); <URL>/api/v1/query is asked.
    #[arg(long, value_name = "URL")]
    pub prometheus: String,
    /// A file holding a bearer token (never printed).
    #[arg(long, value_name = "FILE", conflicts_with = "basic_auth_user")]
    pub bearer_token_file: Option<PathBuf>,
    /// Basic auth user; its password comes from --basic-auth-password-file.
    #[arg(long, value_name = "USER", requires = "basic_auth_password_file")]
    pub basic_auth_user: Option<String>,
    /// A file holding the basic auth password (never printed).
    #[arg(long, value_name = "FILE", requires = "basic_auth_user")]
    pub basic_auth_password_file: Option<PathBuf>,
    /// PEM certificate(s) to trust besides the system's, for an https URL.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// Do not check the server's certificate (a test server; never across a network you do not own).
    #[arg(long)]
    pub insecure_skip_verify: bool,
    /// Send the bearer token or basic auth password over a plain http:// URL
    /// (refused otherwise: anyone on the path can read them).
    #[arg(long)]
    pub allow_http_credentials: bool,
    /// The largest answer to one query that is read (bytes); a larger one is an error.
    #[arg(long, default_value_t = crate::host::prometheus::MAX_ANSWER_BYTES, value_name = "BYTES")]
    pub max_answer_bytes: u64,
    /// The label naming a node; series without it are named by `instance`.
    #[arg(long, default_value = "node", value_name = "LABEL")]
    pub node_label: String,
    /// Print the report as JSON (errors as {"error": …}).
    #[arg(long)]
    pub json: bool,
    /// How long each query may take (connect included).
    #[arg(long, default_value = "10s", value_parser = duration::parse, value_name = "DURATION")]
    pub timeout: Duration,
    /// The window in which flaps are counted; also how far back a node that stopped reporting is remembered.
    #[arg(long, default_value = "1h", value_parser = duration::parse, value_name = "DURATION")]
    pub flap_window: Duration,
    /// A port with more flaps than this within --flap-window is a flapper (the rule of the rdma.link check and the RDMALinkFlapping alert).
    #[arg(long, default_value_t = 3.0, value_name = "N", value_parser = threshold)]
    pub flap_threshold: f64,
}

/// A count of flaps: a finite number, not negative.
fn threshold(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(n) if n.is_finite() && n >= 0.0 => Ok(n),
        _ => Err(format!("{text:?} is not a number of flaps (0 or more)")),
    }
}

/// `--json`: the report, with what it was asked of and how long that took.
#[derive(Serialize)]
struct JsonOut<'a> {
    prometheus: &'a str,
    node_label: &'a str,
    flap_window_seconds: u64,
    flap_threshold: f64,
    query_seconds: f64,
    #[serde(flatten)]
    report: &'a Report,
}

fn print(bytes: &[u8]) {
    let _ = std::io::stdout().lock().write_all(bytes);
}

/// Says why Prometheus could not be asked, on stderr (and as JSON on stdout with --json).
fn cannot_ask(json: bool, msg: &str) -> u8 {
    // The message may quote the server's answer.
    eprintln!("rdma-node-agent fleet: {}", render::terminal_safe(msg));
    if json {
        let mut b =
            serde_json::to_vec_pretty(&serde_json::json!({ "error": msg })).unwrap_or_default();
        b.push(b'\n');
        print(&b);
    }
    EXIT_CANNOT_ASK
}

/// Runs `fleet`; the exit code: 0 every node fine, 1 a node is not, 2 Prometheus could not tell.
pub fn run(a: &FleetArgs) -> u8 {
    let auth = match (
        &a.bearer_token_file,
        &a.basic_auth_user,
        &a.basic_auth_password_file,
    ) {
        (Some(f), _, _) => Secret::from_file("--bearer-token-file", f).map(Auth::Bearer),
        (None, Some(user), Some(f)) => {
            Secret::from_file("--basic-auth-password-file", f).map(|password| Auth::Basic {
                user: user.clone(),
                password,
            })
        }
        _ => Ok(Auth::None),
    };
    let prom = auth.and_then(|auth| {
        Prometheus::new(&Options {
            url: a.prometheus.clone(),
            auth,
            ca_file: a.ca_file.clone(),
            insecure_skip_verify: a.insecure_skip_verify,
            timeout: a.timeout,
            allow_http_credentials: a.allow_http_credentials,
            max_answer_bytes: a.max_answer_bytes,
        })
    });
    let prom = match prom {
        Ok(p) => p,
        Err(e) => return cannot_ask(a.json, &e.to_string()),
    };
    if a.insecure_skip_verify {
        eprintln!("warning: --insecure-skip-verify: the server's certificate is not checked");
    }
    let set = Settings {
        node_label: a.node_label.clone(),
        flap_threshold: a.flap_threshold,
        flap_window: a.flap_window,
    };
    let (input, took) = match ask(&prom, &set) {
        Ok(x) => x,
        Err(e) => return cannot_ask(a.json, &e.to_string()),
    };
    let report = analyse::analyse(&input, &set);
    if report.nodes == 0 && report.not_reporting.is_empty() {
        // Nothing to judge is not "every node is fine".
        return cannot_ask(
            a.json,
            &format!(
                "Prometheus at {} has no rdma_node_agent_ready series: it scrapes no rdma-node-agent \
                 (check its scrape config and `up` of the agents' job; the agent listens on \
                 127.0.0.1:9470 unless http.listen says otherwise)",
                prom.url()
            ),
        );
    }
    if a.json {
        let out = JsonOut {
            prometheus: prom.url(),
            node_label: &a.node_label,
            flap_window_seconds: a.flap_window.as_secs(),
            flap_threshold: a.flap_threshold,
            query_seconds: took.as_secs_f64(),
            report: &report,
        };
        let mut b = serde_json::to_vec_pretty(&out).unwrap_or_default();
        b.push(b'\n');
        print(&b);
    } else {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0.0, |d| d.as_secs_f64());
        print(render::text(&report, prom.url(), &set, took, now).as_bytes());
    }
    report.exit_code()
}
