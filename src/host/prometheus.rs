//! A client of the Prometheus HTTP API's instant queries (`GET /api/v1/query`,
//! which Thanos Query and Mimir serve too), for `rdma-node-agent fleet`.
//! Secrets are read from files and never shown: not in errors, not in `Debug`.
//! The response format: <https://prometheus.io/docs/prometheus/latest/querying/api/>.
//! Credentials go over plain `http://` only when asked for explicitly; no
//! proxy is used (`*_PROXY` is ignored: the URL given is the server asked);
//! an answer is read up to a bound ([`Options::max_answer_bytes`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use reqwest::Url;
use serde::Deserialize;

/// A password or token: its `Debug` says only that there is one.
#[derive(Clone)]
pub struct Secret(String);

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(<redacted>)")
    }
}

impl Secret {
    /// The file's content without its trailing newline (as Prometheus reads
    /// its own `password_file` and `credentials_file`).
    pub fn from_file(what: &'static str, path: &Path) -> Result<Secret, PromError> {
        let text = std::fs::read_to_string(path).map_err(|source| PromError::ReadFile {
            what,
            path: path.to_owned(),
            source,
        })?;
        let s = text.trim_end_matches(['\n', '\r']).to_owned();
        if s.is_empty() {
            return Err(PromError::EmptySecret {
                what,
                path: path.to_owned(),
            });
        }
        Ok(Secret(s))
    }
}

#[derive(Debug, Clone, Default)]
pub enum Auth {
    #[default]
    None,
    Bearer(Secret),
    Basic {
        user: String,
        password: Secret,
    },
}

#[derive(Debug, Clone)]
pub struct Options {
    pub url: String,
    pub auth: Auth,
    /// PEM certificates trusted besides the system's.
    pub ca_file: Option<PathBuf>,
    pub insecure_skip_verify: bool,
    pub timeout: Duration,
    /// Send the credentials over plain http:// (where anyone on the path reads them).
    pub allow_http_credentials: bool,
    /// The largest answer read; a larger one is an error, not a memory spike.
    pub max_answer_bytes: u64,
}

/// The default bound on one answer: ~100k series of the agent's.
pub const MAX_ANSWER_BYTES: u64 = 32 << 20;

/// One element of an instant vector: its labels (with `__name__` when the
/// expression keeps it) and its value.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub labels: BTreeMap<String, String>,
    pub value: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum PromError {
    #[error(
        "invalid --prometheus URL {url}: {why} (give it as http(s)://host:port, with the path prefix of Thanos or Mimir if any)"
    )]
    BadUrl { url: String, why: String },
    #[error("cannot read the {what} {}: {source}", path.display())]
    ReadFile {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("the {what} {} is empty", path.display())]
    EmptySecret { what: &'static str, path: PathBuf },
    #[error("no PEM certificate could be read from --ca-file {}: {why}", path.display())]
    BadCa { path: PathBuf, why: String },
    #[error("cannot set up the HTTP client: {0}")]
    Client(String),
    #[error(
        "cannot reach Prometheus at {url}: {why} (check the URL and that Prometheus listens there; for https, --ca-file or --insecure-skip-verify)"
    )]
    Unreachable { url: String, why: String },
    #[error("Prometheus at {url} answered HTTP {status}{detail}: {hint}")]
    Http {
        url: String,
        status: u16,
        detail: String,
        hint: &'static str,
    },
    #[error("Prometheus at {url} could not run the query `{query}`: {error_type}: {error}")]
    Query {
        url: String,
        query: String,
        error_type: String,
        error: String,
    },
    #[error(
        "{url} did not answer with the query API's JSON: {why} (is it a Prometheus-compatible query endpoint?)"
    )]
    Malformed { url: String, why: String },
    #[error(
        "refusing to send credentials to {url} over plain http://, where anyone on the path can read them: use https://, or --allow-http-credentials for a server you reach over a network you trust"
    )]
    PlainHttpCredentials { url: String },
    #[error(
        "Prometheus at {url} answered more than {limit} bytes to the query `{query}`; read no further (raise --max-answer-bytes if that fleet is that large)"
    )]
    TooLarge {
        url: String,
        query: String,
        limit: u64,
    },
}

pub struct Prometheus {
    client: reqwest::blocking::Client,
    /// `<base>/api/v1/query`.
    endpoint: Url,
    /// The URL as given, for messages.
    shown: String,
    auth: Auth,
    max_answer_bytes: u64,
}

/// The envelope every API answer has, success or error.
#[derive(Deserialize)]
struct Envelope<'a> {
    status: String,
    #[serde(default, borrow)]
    data: Option<Data<'a>>,
    #[serde(default, rename = "errorType")]
    error_type: Option<String>,
    #[serde(default)]
    error: Option<String>,
}

/// The result is kept as the answer's own bytes until its type is known, then
/// decoded straight into samples (no `Value` tree: a 30 MB answer took 686 MB).
#[derive(Deserialize)]
struct Data<'a> {
    #[serde(rename = "resultType")]
    result_type: String,
    #[serde(borrow)]
    result: &'a serde_json::value::RawValue,
}

#[derive(Deserialize)]
struct VectorElement {
    metric: BTreeMap<String, String>,
    value: (f64, String),
}

impl Prometheus {
    pub fn new(o: &Options) -> Result<Prometheus, PromError> {
        let mut base = Url::parse(&o.url).map_err(|e| PromError::BadUrl {
            url: o.url.clone(),
            why: e.to_string(),
        })?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(PromError::BadUrl {
                url: o.url.clone(),
                why: format!("scheme {} is not http or https", base.scheme()),
            });
        }
        // A password in the URL would show in `ps` and shell history.
        if !base.username().is_empty() || base.password().is_some() {
            let _ = base.set_password(None);
            let _ = base.set_username("");
            return Err(PromError::BadUrl {
                url: format!("{base} (credentials removed here)"),
                why:
                    "it carries credentials; use --basic-auth-user with --basic-auth-password-file"
                        .into(),
            });
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(PromError::BadUrl {
                url: o.url.clone(),
                why: "it has a query or fragment".into(),
            });
        }
        let shown = base.to_string();
        if base.scheme() == "http" && !matches!(o.auth, Auth::None) && !o.allow_http_credentials {
            return Err(PromError::PlainHttpCredentials { url: shown });
        }
        let path = format!("{}/api/v1/query", base.path().trim_end_matches('/'));
        base.set_path(&path);
        let mut b = super::http_client::blocking_builder()
            // The URL given is the server asked: HTTP(S)_PROXY would send the
            // credentials to whoever set it.
            .no_proxy()
            .timeout(o.timeout)
            .connect_timeout(o.timeout)
            .user_agent(concat!(
                "rdma-node-agent/",
                env!("CARGO_PKG_VERSION"),
                " fleet"
            ));
        if let Some(path) = &o.ca_file {
            let pem = std::fs::read(path).map_err(|source| PromError::ReadFile {
                what: "--ca-file",
                path: path.clone(),
                source,
            })?;
            let certs =
                reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| PromError::BadCa {
                    path: path.clone(),
                    why: e.to_string(),
                })?;
            if certs.is_empty() {
                return Err(PromError::BadCa {
                    path: path.clone(),
                    why: "the file holds no CERTIFICATE block".into(),
                });
            }
            for c in certs {
                b = b.add_root_certificate(c);
            }
        }
        if o.insecure_skip_verify {
            b = b.tls_danger_accept_invalid_certs(true);
        }
        let client = b.build().map_err(|e| PromError::Client(chain(&e)))?;
        Ok(Prometheus {
            client,
            endpoint: base,
            shown,
            auth: o.auth.clone(),
            max_answer_bytes: o.max_answer_bytes,
        })
    }

    /// The URL as given (without credentials: they are refused).
    pub fn url(&self) -> &str {
        &self.shown
    }

    /// One instant query, evaluated at the server's now; the result must be a vector.
    pub fn query(&self, promql: &str) -> Result<Vec<Sample>, PromError> {
        let mut url = self.endpoint.clone();
        url.query_pairs_mut().append_pair("query", promql);
        let mut req = self.client.get(url);
        req = match &self.auth {
            Auth::None => req,
            Auth::Bearer(t) => req.bearer_auth(&t.0),
            Auth::Basic { user, password } => req.basic_auth(user, Some(&password.0)),
        };
        let resp = req.send().map_err(|e| PromError::Unreachable {
            url: self.shown.clone(),
            why: chain(&e.without_url()),
        })?;
        let status = resp.status().as_u16();
        let limit = self.max_answer_bytes;
        let too_large = || PromError::TooLarge {
            url: self.shown.clone(),
            query: promql.into(),
            limit,
        };
        if resp.content_length().is_some_and(|n| n > limit) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        std::io::Read::read_to_end(
            &mut std::io::Read::take(resp, limit.saturating_add(1)),
            &mut body,
        )
        .map_err(|e| PromError::Unreachable {
            url: self.shown.clone(),
            why: format!("reading the answer: {}", chain(&e)),
        })?;
        if body.len() as u64 > limit {
            return Err(too_large());
        }
        decode(&self.shown, promql, status, &body)
    }
}

/// The answer of `/api/v1/query`: its samples, or what went wrong, saying what to check.
fn decode(url: &str, query: &str, status: u16, body: &[u8]) -> Result<Vec<Sample>, PromError> {
    let env: Option<Envelope> = serde_json::from_slice(body).ok();
    // Prometheus answers a bad query with 400/422 and its own JSON error.
    if let Some(Envelope {
        status: s,
        error_type: Some(t),
        error: Some(e),
        ..
    }) = &env
        && s == "error"
        && matches!(status, 400 | 422 | 503)
    {
        return Err(PromError::Query {
            url: url.into(),
            query: query.into(),
            error_type: t.clone(),
            error: e.clone(),
        });
    }
    if !(200..300).contains(&status) {
        return Err(http_error(url, status, body));
    }
    let malformed = |why: String| PromError::Malformed {
        url: url.into(),
        why,
    };
    let env = env.ok_or_else(|| {
        malformed(match serde_json::from_slice::<serde_json::Value>(body) {
            Err(e) => format!("not JSON ({e})"),
            Ok(_) => "no \"status\" field".into(),
        })
    })?;
    if env.status != "success" {
        return Err(malformed(format!(
            "status {:?}: {}",
            env.status,
            env.error.unwrap_or_default()
        )));
    }
    let data = env
        .data
        .ok_or_else(|| malformed("no \"data\" field".into()))?;
    if data.result_type != "vector" {
        return Err(malformed(format!(
            "the query `{query}` gave a {} where a vector was expected",
            data.result_type
        )));
    }
    let elements: Vec<VectorElement> =
        serde_json::from_str(data.result.get()).map_err(|e| malformed(e.to_string()))?;
    elements
        .into_iter()
        .map(|v| {
            // The API writes values as strings: "1", "NaN", "+Inf".
            let value = v.value.1.parse::<f64>().map_err(|_| {
                malformed(format!("the sample value {:?} is not a number", v.value.1))
            })?;
            Ok(Sample {
                labels: v.metric,
                value,
            })
        })
        .collect()
}

/// A status other than 2xx, with what to check and the answer's first line.
fn http_error(url: &str, status: u16, body: &[u8]) -> PromError {
    let hint = match status {
        401 | 403 => {
            "check the credentials: --bearer-token-file, or --basic-auth-user with --basic-auth-password-file"
        }
        404 => {
            "check the URL's path: the query API must answer at <URL>/api/v1/query (Thanos and Mimir: include their prefix, e.g. /prometheus)"
        }
        407 => {
            "a proxy asks for credentials; fleet uses none (HTTP_PROXY and HTTPS_PROXY are ignored), so the URL itself answered so"
        }
        s if s >= 500 => "the server failed; check its logs, or try again",
        _ => "check the URL",
    };
    let text = String::from_utf8_lossy(body);
    let first = text.lines().next().unwrap_or("").trim();
    let detail = if first.is_empty() {
        String::new()
    } else {
        format!(" ({})", first.chars().take(200).collect::<String>())
    };
    PromError::Http {
        url: url.into(),
        status,
        detail,
        hint,
    }
}

/// An error and its causes on one line (reqwest's own Display stops at the first).
fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
#[path = "prometheus_tests.rs"]
mod tests;
