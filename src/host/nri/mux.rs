//! NRI's connection multiplexing: one unix socket (the trunk) carries several
//! logical byte streams, each ttrpc on its own. Every frame is an 8-byte
//! header, the connection id and the payload length as big-endian u32, then the
//! payload (containerd/nri pkg/net/multiplex/mux.go). Connection 1 carries the
//! plugin's ttrpc service (the runtime calls it), 2 the runtime's (the plugin
//! calls it) (multiplex/ttrpc.go).
//!
//! The ttrpc crate takes any async byte stream but has no such framing, so each
//! logical connection is an in-process duplex pipe pumped to and from the trunk.

use std::collections::HashMap;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;

/// The plugin's service: the runtime is the ttrpc client on it.
pub const PLUGIN_SERVICE_CONN: u32 = 1;
/// The runtime's service: the plugin is the ttrpc client on it.
pub const RUNTIME_SERVICE_CONN: u32 = 2;

const HEADER_LEN: usize = 8;
/// A ttrpc message (10-byte header + at most 4 MiB) per frame at most, as mux.go.
const MAX_PAYLOAD: usize = 10 + (4 << 20);
/// What one duplex pipe buffers before its writer waits.
const PIPE_BUFFER: usize = 256 << 10;

/// One frame's header.
pub fn header(conn: u32, len: u32) -> [u8; HEADER_LEN] {
    let mut h = [0u8; HEADER_LEN];
    h[..4].copy_from_slice(&conn.to_be_bytes());
    h[4..].copy_from_slice(&len.to_be_bytes());
    h
}

/// The connection id and payload length of a header.
pub fn parse_header(h: &[u8; HEADER_LEN]) -> (u32, usize) {
    let conn = u32::from_be_bytes([h[0], h[1], h[2], h[3]]);
    let len = u32::from_be_bytes([h[4], h[5], h[6], h[7]]) as usize;
    (conn, len)
}

/// The trunk split into logical connections; dropping it stops the pumps.
pub struct Mux {
    tasks: Vec<JoinHandle<()>>,
    /// Ends when the trunk closes or fails (containerd stopped), with why.
    pub closed: tokio::sync::watch::Receiver<Option<String>>,
}

impl Drop for Mux {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// Splits `trunk` into the given connection ids; returns the mux and, per id,
/// the stream a ttrpc client or server uses.
pub fn split<T>(trunk: T, ids: &[u32]) -> (Mux, Vec<DuplexStream>)
where
    T: AsyncRead + AsyncWrite + Send + 'static,
{
    let (mut rd, wr) = tokio::io::split(trunk);
    let wr = Arc::new(Mutex::new(wr));
    let (closed_tx, closed) = tokio::sync::watch::channel(None);
    let closed_tx = Arc::new(closed_tx);
    let mut tasks = Vec::new();
    let mut ours = Vec::new();
    let mut inbound: HashMap<u32, tokio::io::WriteHalf<DuplexStream>> = HashMap::new();
    for &id in ids {
        let (mine, theirs) = tokio::io::duplex(PIPE_BUFFER);
        ours.push(theirs);
        let (mut from_ttrpc, to_ttrpc) = tokio::io::split(mine);
        inbound.insert(id, to_ttrpc);
        // ttrpc → trunk: whatever the logical connection writes, framed.
        let wr = wr.clone();
        let closed_tx = closed_tx.clone();
        tasks.push(tokio::spawn(async move {
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = match from_ttrpc.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(n) => n,
                };
                let mut w = wr.lock().await;
                let sent = async {
                    w.write_all(&header(id, n as u32)).await?;
                    w.write_all(&buf[..n]).await?;
                    w.flush().await
                };
                if let Err(e) = sent.await {
                    closed_tx.send_replace(Some(format!("writing to the NRI socket: {e}")));
                    return;
                }
            }
        }));
    }
    // trunk → ttrpc: frames to their connection; unknown ids are dropped, as mux.go does.
    tasks.push(tokio::spawn(async move {
        let why = loop {
            let mut h = [0u8; HEADER_LEN];
            if let Err(e) = rd.read_exact(&mut h).await {
                break if e.kind() == std::io::ErrorKind::UnexpectedEof {
                    "the runtime closed the NRI connection".to_owned()
                } else {
                    format!("reading the NRI socket: {e}")
                };
            }
            let (id, len) = parse_header(&h);
            if len > MAX_PAYLOAD {
                break format!(
                    "NRI frame of {len} bytes on connection {id}: over the {MAX_PAYLOAD}-byte limit"
                );
            }
            let mut payload = vec![0u8; len];
            if let Err(e) = rd.read_exact(&mut payload).await {
                break format!("reading the NRI socket: {e}");
            }
            if let Some(to) = inbound.get_mut(&id) {
                if to.write_all(&payload).await.is_err() {
                    break format!("connection {id}'s ttrpc end went away");
                }
            }
        };
        // The ttrpc ends read EOF (a split duplex closes only by shutdown,
        // while its read half lives on in the writer task).
        for to in inbound.values_mut() {
            let _ = to.shutdown().await;
        }
        closed_tx.send_replace(Some(why));
    }));
    (Mux { tasks, closed }, ours)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_big_endian_id_then_length() {
        assert_eq!(header(2, 0x0102), [0, 0, 0, 2, 0, 0, 1, 2]);
        assert_eq!(parse_header(&header(1, 77)), (1, 77));
    }

    #[tokio::test]
    async fn frames_go_to_their_connection_and_back() {
        let (trunk, mut peer) = tokio::io::duplex(1 << 16);
        let (mux, mut conns) = split(trunk, &[1, 2]);
        // The peer sends to connection 2, then to an id nobody opened, then to 1.
        peer.write_all(&header(2, 3)).await.unwrap();
        peer.write_all(b"two").await.unwrap();
        peer.write_all(&header(9, 1)).await.unwrap();
        peer.write_all(b"x").await.unwrap();
        peer.write_all(&header(1, 3)).await.unwrap();
        peer.write_all(b"one").await.unwrap();
        let mut b = [0u8; 3];
        conns[1].read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"two");
        conns[0].read_exact(&mut b).await.unwrap();
        assert_eq!(&b, b"one");
        // What connection 1 writes reaches the peer framed with id 1.
        conns[0].write_all(b"hello").await.unwrap();
        let mut h = [0u8; HEADER_LEN];
        peer.read_exact(&mut h).await.unwrap();
        assert_eq!(parse_header(&h), (1, 5));
        let mut p = [0u8; 5];
        peer.read_exact(&mut p).await.unwrap();
        assert_eq!(&p, b"hello");
        // The peer hangs up: the mux says so and the streams end.
        drop(peer);
        let mut closed = mux.closed.clone();
        closed.wait_for(|c| c.is_some()).await.unwrap();
        assert_eq!(conns[0].read(&mut b).await.unwrap(), 0);
    }
}
