//! One NRI plugin session, as containerd/nri's pkg/stub does it: connect to the
//! socket, serve the plugin service on connection 1, call RegisterPlugin on the
//! runtime service (connection 2); the runtime then calls Configure (we
//! subscribe to CreateContainer only) and Synchronize, and CreateContainer for
//! every new container until the connection ends.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use prost::Message;
use tokio::sync::mpsc;
use ttrpc::r#async::transport::{Listener, Socket};
use ttrpc::r#async::{Client, MethodHandler, Server, Service, TtrpcContext};
use ttrpc::{Code, Request, Response};

use super::{Handler, State, api, event_bit, mux};

const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";
const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// Who the plugin says it is.
#[derive(Debug, Clone)]
pub struct Identity {
    /// The NRI socket, as a host path.
    pub socket: PathBuf,
    pub name: String,
    /// Two digits: the plugin's place among the runtime's plugins.
    pub index: String,
    /// How long the runtime has to call Configure and Synchronize after
    /// registration (containerd's own `plugin_registration_timeout` is 5 s).
    pub registration_timeout: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("cannot connect to the NRI socket {path}: {source}")]
    Connect {
        path: PathBuf,
        source: std::io::Error,
    },
    /// The socket or what listens on it is not containerd's (`host::peer`).
    #[error("{0}")]
    Untrusted(String),
    #[error("NRI RegisterPlugin on {path}: {message}")]
    Register { path: PathBuf, message: String },
    #[error("{0}")]
    Ended(String),
}

/// What the plugin service's handlers tell the session.
enum Event {
    Configured(String),
    Synchronized,
    Shutdown,
}

struct Method {
    name: &'static str,
    handler: Arc<dyn Handler>,
    events: mpsc::UnboundedSender<Event>,
}

fn ok(payload: Vec<u8>) -> Response {
    Response {
        status: Some(ttrpc::get_status(Code::OK, String::new())),
        payload,
    }
}

fn decode<M: Message + Default>(req: &Request) -> ttrpc::Result<M> {
    M::decode(req.payload.as_slice()).map_err(|e| {
        ttrpc::Error::RpcStatus(ttrpc::get_status(
            Code::INVALID_ARGUMENT,
            format!("{}: cannot decode the request: {e}", req.method),
        ))
    })
}

#[async_trait]
impl MethodHandler for Method {
    async fn handler(&self, _ctx: TtrpcContext, req: Request) -> ttrpc::Result<Response> {
        let out = match self.name {
            "Configure" => {
                let r: api::ConfigureRequest = decode(&req)?;
                let _ = self.events.send(Event::Configured(format!(
                    "{} {}",
                    r.runtime_name, r.runtime_version
                )));
                api::ConfigureResponse {
                    events: event_bit(api::Event::CreateContainer),
                }
                .encode_to_vec()
            }
            "Synchronize" => {
                let r: api::SynchronizeRequest = decode(&req)?;
                self.handler.synchronize(&r.pods, &r.containers);
                // `more`: the runtime sends the rest in further calls (stub.go collectSync).
                if !r.more {
                    let _ = self.events.send(Event::Synchronized);
                }
                api::SynchronizeResponse {
                    update: Vec::new(),
                    more: r.more,
                }
                .encode_to_vec()
            }
            "CreateContainer" => {
                let r: api::CreateContainerRequest = decode(&req)?;
                self.handler.create_container(&r).encode_to_vec()
            }
            "Shutdown" => {
                let _ = self.events.send(Event::Shutdown);
                api::Empty {}.encode_to_vec()
            }
            // Subscribed to none of these: answered empty, as the stub does.
            "UpdateContainer" => api::UpdateContainerResponse::default().encode_to_vec(),
            "StopContainer" => api::StopContainerResponse::default().encode_to_vec(),
            _ => api::Empty {}.encode_to_vec(),
        };
        Ok(ok(out))
    }
}

fn plugin_service(
    handler: Arc<dyn Handler>,
    events: mpsc::UnboundedSender<Event>,
) -> HashMap<String, Service> {
    let names = [
        "Configure",
        "Synchronize",
        "Shutdown",
        "CreateContainer",
        "UpdateContainer",
        "StopContainer",
        "StateChange",
    ];
    let methods = names
        .iter()
        .map(|&name| {
            let m: Box<dyn MethodHandler + Send + Sync> = Box::new(Method {
                name,
                handler: handler.clone(),
                events: events.clone(),
            });
            (name.to_owned(), m)
        })
        .collect();
    HashMap::from([(
        PLUGIN_SERVICE.to_owned(),
        Service {
            methods,
            streams: HashMap::new(),
        },
    )])
}

/// Connects, registers and serves until the runtime closes the connection (a
/// containerd restart or stop) or `stop` fires. `state` says registered from
/// Synchronize until the end.
pub async fn session(
    id: &Identity,
    handler: Arc<dyn Handler>,
    state: &State,
    stop: &mut tokio::sync::watch::Receiver<bool>,
) -> Result<(), SessionError> {
    // Whoever answers here is told every container and could pose as containerd.
    crate::host::peer::socket_file(&id.socket).map_err(SessionError::Untrusted)?;
    let trunk = tokio::net::UnixStream::connect(&id.socket)
        .await
        .map_err(|source| SessionError::Connect {
            path: id.socket.clone(),
            source,
        })?;
    crate::host::peer::peer(&trunk, &id.socket).map_err(SessionError::Untrusted)?;
    let (mux, mut conns) = mux::split(
        trunk,
        &[mux::PLUGIN_SERVICE_CONN, mux::RUNTIME_SERVICE_CONN],
    );
    let runtime_conn = conns.pop().expect("two connections");
    let plugin_conn = conns.pop().expect("two connections");
    let (tx, mut events) = mpsc::unbounded_channel();
    // One connection, then a listener that never ends: ttrpc's shutdown
    // expects its accept loop still running.
    let incoming = futures_util::StreamExt::chain(
        futures_util::stream::iter([Ok::<_, std::io::Error>(plugin_conn)]),
        futures_util::stream::pending(),
    );
    let mut server = Server::new()
        .add_listener(Listener::new(incoming))
        .register_service(plugin_service(handler, tx));
    server
        .start()
        .await
        .map_err(|e| SessionError::Ended(format!("cannot serve the NRI plugin service: {e}")))?;
    // Kept for the session: the runtime's service speaks over it.
    let _client = register(runtime_conn, id).await?;
    let mut closed = mux.closed.clone();
    let deadline = tokio::time::sleep(id.registration_timeout * 2);
    tokio::pin!(deadline);
    let mut synchronized = false;
    let why = loop {
        tokio::select! {
            ev = events.recv() => match ev {
                Some(Event::Configured(runtime)) => {
                    tracing::info!(runtime = %runtime, socket = %id.socket.display(), "NRI: configured, subscribed to CreateContainer");
                }
                Some(Event::Synchronized) => {
                    synchronized = true;
                    state.set_registered(true);
                    tracing::info!(socket = %id.socket.display(), "NRI plugin registered and synchronized");
                }
                Some(Event::Shutdown) => break "the runtime asked the plugin to shut down".to_owned(),
                None => break "the plugin service ended".to_owned(),
            },
            _ = &mut deadline, if !synchronized => {
                break format!("the runtime did not configure and synchronize the plugin within {:?}", id.registration_timeout * 2);
            }
            c = async { closed.wait_for(|c| c.is_some()).await.ok().and_then(|c| c.clone()) } => {
                break c.unwrap_or_else(|| "the NRI connection ended".into());
            }
            _ = stop.changed() => {
                state.set_registered(false);
                let _ = server.shutdown().await;
                return Ok(());
            }
        }
    };
    let _ = server.shutdown().await;
    drop(mux);
    state.set_error(why.clone());
    Err(SessionError::Ended(why))
}

/// Registers the plugin with the runtime over its connection.
async fn register(
    runtime_conn: tokio::io::DuplexStream,
    id: &Identity,
) -> Result<Client, SessionError> {
    let client = Client::new(Socket::new(runtime_conn));
    let register = api::RegisterPluginRequest {
        plugin_name: id.name.clone(),
        plugin_idx: id.index.clone(),
    };
    let req = Request {
        service: RUNTIME_SERVICE.into(),
        method: "RegisterPlugin".into(),
        payload: register.encode_to_vec(),
        timeout_nano: id.registration_timeout.as_nanos() as i64,
        metadata: Vec::new(),
    };
    client
        .request(req)
        .await
        .map_err(|e| SessionError::Register {
            path: id.socket.clone(),
            message: e.to_string(),
        })?;
    Ok(client)
}

#[cfg(test)]
#[path = "plugin_tests.rs"]
mod tests;
