//! One session against a stand-in runtime that speaks NRI's wire as
//! containerd does (the mux, ttrpc each way): the logic of the session, with
//! no containerd. The real thing is tests/real_containerd_nri.rs.

use std::sync::Mutex;

use super::*;

/// Answers CreateContainer with the memlock for any container with devices.
struct Fixed {
    synced: Mutex<Vec<String>>,
}

impl Handler for Fixed {
    fn synchronize(&self, _pods: &[api::PodSandbox], containers: &[api::Container]) {
        let mut s = self.synced.lock().unwrap();
        s.extend(containers.iter().map(|c| c.id.clone()));
    }

    fn create_container(&self, req: &api::CreateContainerRequest) -> api::CreateContainerResponse {
        let devices = req
            .container
            .as_ref()
            .and_then(|c| c.linux.as_ref())
            .is_some_and(|l| !l.devices.is_empty());
        let mut out = api::CreateContainerResponse::default();
        if devices {
            out.adjust = Some(api::ContainerAdjustment {
                rlimits: vec![api::PosixRlimit {
                    r#type: "RLIMIT_MEMLOCK".into(),
                    soft: 7,
                    hard: 7,
                }],
                ..Default::default()
            });
        }
        out
    }
}

/// The runtime's RegisterPlugin: says who registered.
struct Register(mpsc::UnboundedSender<api::RegisterPluginRequest>);

#[async_trait]
impl MethodHandler for Register {
    async fn handler(&self, _ctx: TtrpcContext, req: Request) -> ttrpc::Result<Response> {
        let r: api::RegisterPluginRequest = decode(&req)?;
        let _ = self.0.send(r);
        Ok(ok(api::Empty {}.encode_to_vec()))
    }
}

async fn call<Q: Message, A: Message + Default>(c: &Client, method: &str, q: &Q) -> A {
    let req = Request {
        service: PLUGIN_SERVICE.into(),
        method: method.into(),
        payload: q.encode_to_vec(),
        timeout_nano: 5_000_000_000,
        metadata: Vec::new(),
    };
    let r = c
        .request(req)
        .await
        .unwrap_or_else(|e| panic!("{method}: {e}"));
    A::decode(r.payload.as_slice()).unwrap()
}

#[tokio::test]
async fn registers_configures_synchronizes_adjusts_and_notices_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    let id = Identity {
        socket: socket.clone(),
        name: "rdma-node-agent".into(),
        index: "10".into(),
        registration_timeout: Duration::from_secs(5),
    };
    let handler = Arc::new(Fixed {
        synced: Mutex::default(),
    });
    let state = Arc::new(State::default());
    let (_stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let plugin = {
        let (handler, state) = (handler.clone(), state.clone());
        tokio::spawn(async move { session(&id, handler, &state, &mut stop).await })
    };

    // The runtime's side: serve Runtime on connection 2, call Plugin on 1.
    let (trunk, _) = listener.accept().await.unwrap();
    let (runtime_mux, mut conns) = mux::split(
        trunk,
        &[mux::PLUGIN_SERVICE_CONN, mux::RUNTIME_SERVICE_CONN],
    );
    let served = conns.pop().unwrap();
    let to_plugin = conns.pop().unwrap();
    let (reg_tx, mut registered) = mpsc::unbounded_channel();
    let methods: HashMap<String, Box<dyn MethodHandler + Send + Sync>> =
        HashMap::from([("RegisterPlugin".to_owned(), Box::new(Register(reg_tx)) as _)]);
    let mut server = Server::new()
        .add_listener(Listener::new(futures_util::StreamExt::chain(
            futures_util::stream::iter([Ok::<_, std::io::Error>(served)]),
            futures_util::stream::pending(),
        )))
        .register_service(HashMap::from([(
            RUNTIME_SERVICE.to_owned(),
            Service {
                methods,
                streams: HashMap::new(),
            },
        )]));
    server.start().await.unwrap();
    let r = registered.recv().await.unwrap();
    assert_eq!(
        (r.plugin_name.as_str(), r.plugin_idx.as_str()),
        ("rdma-node-agent", "10")
    );

    let client = Client::new(Socket::new(to_plugin));
    let conf: api::ConfigureResponse =
        call(&client, "Configure", &api::ConfigureRequest::default()).await;
    assert_eq!(conf.events, 0x8, "CreateContainer only");
    // Synchronize in two parts, as the runtime sends a large state.
    let part = |id: &str, more| api::SynchronizeRequest {
        containers: vec![api::Container {
            id: id.into(),
            ..Default::default()
        }],
        more,
        ..Default::default()
    };
    let r: api::SynchronizeResponse = call(&client, "Synchronize", &part("c1", true)).await;
    assert!(r.more && r.update.is_empty());
    assert!(!state.status().registered, "not before the last part");
    let r: api::SynchronizeResponse = call(&client, "Synchronize", &part("c2", false)).await;
    assert!(!r.more && r.update.is_empty());
    assert_eq!(*handler.synced.lock().unwrap(), ["c1", "c2"]);
    // Registered once Synchronize is answered (the session sets it right after).
    for _ in 0..100 {
        if state.status().registered {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(state.status().registered);

    let with_device = api::CreateContainerRequest {
        container: Some(api::Container {
            linux: Some(api::LinuxContainer {
                devices: vec![api::LinuxDevice {
                    path: "/dev/infiniband/uverbs0".into(),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let r: api::CreateContainerResponse = call(&client, "CreateContainer", &with_device).await;
    let rl = r.adjust.unwrap().rlimits;
    assert_eq!(
        (rl[0].r#type.as_str(), rl[0].soft, rl[0].hard),
        ("RLIMIT_MEMLOCK", 7, 7)
    );
    let r: api::CreateContainerResponse = call(
        &client,
        "CreateContainer",
        &api::CreateContainerRequest::default(),
    )
    .await;
    assert!(r.adjust.is_none());

    // The runtime goes away (a containerd restart): the session ends and says why.
    drop(client);
    let _ = server.shutdown().await;
    drop(runtime_mux);
    let end = tokio::time::timeout(Duration::from_secs(5), plugin)
        .await
        .expect("the session noticed the end")
        .unwrap();
    assert!(matches!(end, Err(SessionError::Ended(_))), "{end:?}");
    let st = state.status();
    assert!(!st.registered);
    assert!(st.last_error.is_some());
    assert_eq!(st.registrations, 1);
}

/// A socket someone besides root could have bound (here: writable by all) is
/// refused before connecting, naming it: the plugin is never told a container
/// by an impostor, nor registered by one.
#[tokio::test]
async fn an_untrusted_socket_is_refused_before_connecting() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("nri.sock");
    let listener = tokio::net::UnixListener::bind(&socket).unwrap();
    std::fs::set_permissions(&socket, std::fs::Permissions::from_mode(0o666)).unwrap();
    let id = Identity {
        socket: socket.clone(),
        name: "rdma-node-agent".into(),
        index: "10".into(),
        registration_timeout: Duration::from_secs(5),
    };
    let handler = Arc::new(Fixed {
        synced: Mutex::default(),
    });
    let state = State::default();
    let (_stop_tx, mut stop) = tokio::sync::watch::channel(false);
    let e = session(&id, handler, &state, &mut stop).await.unwrap_err();
    assert!(
        matches!(&e, SessionError::Untrusted(why) if why.contains("nri.sock") && why.contains("writable by others")),
        "{e}"
    );
    assert!(!state.status().registered);
    // Nothing connected.
    let accepted = tokio::time::timeout(Duration::from_millis(100), listener.accept()).await;
    assert!(accepted.is_err(), "the plugin connected anyway");
}
