//! The running containerd's CRI `RuntimeService/Status` with `verbose`: its
//! `info["config"]` is the CRI plugin's effective config as JSON (handlers,
//! default handler, each handler's base spec), straight from the process that
//! creates the pods. Read-only, bounded by a timeout.
//!
//! The two messages are those of the CRI API (k8s.io/cri-api,
//! pkg/apis/runtime/v1/api.proto: `StatusRequest { bool verbose = 1; }`,
//! `StatusResponse { RuntimeStatus status = 1; map<string, string> info = 2; }`),
//! declared here with prost so that the agent needs no protoc at build time.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use tonic::transport::{Endpoint, Uri};

#[derive(Clone, PartialEq, prost::Message)]
struct StatusRequest {
    #[prost(bool, tag = "1")]
    verbose: bool,
}

#[derive(Clone, PartialEq, prost::Message)]
struct StatusResponse {
    #[prost(map = "string, string", tag = "2")]
    info: HashMap<String, String>,
}

const STATUS: &str = "/runtime.v1.RuntimeService/Status";
/// A healthy containerd answers in milliseconds; a hung one must not hold a cycle.
const TIMEOUT: Duration = Duration::from_secs(3);

/// Why the CRI config could not be had, from which socket.
#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("not the live host")]
    NotLive,
    /// Not containerd's socket to ask, or no runtime to ask with.
    #[error("cannot ask {}: {reason}", .socket.display())]
    NotAsked { socket: PathBuf, reason: String },
    #[error("{}: no CRI answer within {} s", .socket.display(), .after.as_secs())]
    TimedOut { socket: PathBuf, after: Duration },
    /// It answered, but not with a config (the gRPC status, or none sent).
    #[error("{}: {reason}", .socket.display())]
    Failed { socket: PathBuf, reason: String },
}

impl super::Host {
    /// The CRI plugin's effective config (JSON) from the containerd listening on
    /// `socket`, or why it could not be had. Live host only.
    pub fn cri_config(&self, socket: &Path) -> Result<String, CriError> {
        if !self.is_live() {
            return Err(CriError::NotLive);
        }
        let asked = socket.to_owned();
        let socket = socket.to_owned();
        let not_asked = |reason: String| CriError::NotAsked {
            socket: asked.clone(),
            reason,
        };
        // What answers decides which base specs are judged: containerd's only.
        super::peer::socket_file(&socket).map_err(not_asked)?;
        let ask = async move {
            let channel = Endpoint::try_from("http://[::]")
                .map_err(|e| e.to_string())?
                .connect_with_connector(tower::service_fn(move |_: Uri| {
                    let socket = socket.clone();
                    async move {
                        let s = tokio::net::UnixStream::connect(&socket).await?;
                        super::peer::peer(&s, &socket).map_err(std::io::Error::other)?;
                        Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(s))
                    }
                }))
                .await
                .map_err(|e| format!("cannot connect: {}", source_chain(&e)))?;
            let mut grpc = tonic::client::Grpc::new(channel);
            grpc.ready().await.map_err(|e| e.to_string())?;
            let codec = tonic_prost::ProstCodec::<StatusRequest, StatusResponse>::default();
            let path = tonic::codegen::http::uri::PathAndQuery::from_static(STATUS);
            let resp = grpc
                .unary(
                    tonic::Request::new(StatusRequest { verbose: true }),
                    path,
                    codec,
                )
                .await
                .map_err(|s| format!("CRI Status failed: {} ({:?})", s.message(), s.code()))?;
            resp.into_inner()
                .info
                .remove("config")
                .ok_or_else(|| "CRI Status (verbose) returned no `config`".to_owned())
        };
        super::rt::block_on(async { tokio::time::timeout(TIMEOUT, ask).await })
            .map_err(|e| not_asked(e.to_string()))?
            .map_err(|_| CriError::TimedOut {
                socket: asked.clone(),
                after: TIMEOUT,
            })?
            .map_err(|reason| CriError::Failed {
                socket: asked.clone(),
                reason,
            })
    }
}

fn source_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}
