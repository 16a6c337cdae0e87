//! One pipelined connection to a Kafka broker: requests are written in order, and responses
//! (which Kafka returns in request order on a connection) are matched to them first-in
//! first-out. Up to `inflight_max` requests may be outstanding.

use crate::sync::Locked as _;
use bytes::{Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use sluice_protocol::api;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, WriteHalf};
use tokio::net::TcpStream;

/// A byte stream to a broker: TCP, or TLS over TCP.
pub trait AsyncStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> AsyncStream for T {}

/// A connected stream, boxed.
pub type Stream = Box<dyn AsyncStream>;
use tokio::sync::{oneshot, Semaphore};

/// Largest response frame this client accepts.
pub const RESPONSE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// A connection-level failure.
#[derive(Debug, thiserror::Error)]
pub enum ConnError {
    /// The socket failed.
    #[error("I/O: {0}")]
    Io(#[from] std::io::Error),
    /// The broker sent something that does not decode.
    #[error("protocol: {0}")]
    Protocol(String),
    /// The connection closed before the response arrived.
    #[error("connection closed")]
    Closed,
}

type Pending = (ApiKey, i16, i32, oneshot::Sender<Result<ResponseKind, ConnError>>);

/// A pipelined connection to one broker.
pub struct Connection {
    writer: tokio::sync::Mutex<WriteHalf<Stream>>,
    /// The socket itself, to shut it down whatever the writer is doing.
    socket: std::net::TcpStream,
    pending: Arc<Mutex<VecDeque<Pending>>>,
    next_id: AtomicI32,
    window: Arc<Semaphore>,
    client_id: String,
    closed: Arc<AtomicBool>,
}

impl Connection {
    /// Connect to `addr` (host:port) over plain TCP; at most `inflight_max` requests are
    /// outstanding.
    pub async fn connect(addr: &str, client_id: &str, inflight_max: usize) -> Result<Connection, ConnError> {
        Connection::connect_secured(addr, client_id, inflight_max, &crate::security::Security::default()).await
    }

    /// [`Connection::connect`] with TLS if `security` says so (SASL comes after ApiVersions,
    /// in the cluster code).
    pub async fn connect_secured(
        addr: &str,
        client_id: &str,
        inflight_max: usize,
        security: &crate::security::Security,
    ) -> Result<Connection, ConnError> {
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        let std_tcp = tcp.into_std()?;
        let socket = std_tcp.try_clone()?;
        let tcp = TcpStream::from_std(std_tcp)?;
        let stream = security.wrap(addr, tcp).await?;
        let (mut rd, wr) = tokio::io::split(stream);
        let pending: Arc<Mutex<VecDeque<Pending>>> = Arc::new(Mutex::new(VecDeque::new()));
        let p = pending.clone();
        let closed = Arc::new(AtomicBool::new(false));
        let closed2 = closed.clone();
        tokio::spawn(async move {
            let mut buf = BytesMut::with_capacity(1 << 20);
            let fail = |p: &Arc<Mutex<VecDeque<Pending>>>| {
                closed2.store(true, Ordering::Release);
                let mut q = p.locked();
                for (_, _, _, tx) in q.drain(..) {
                    let _ = tx.send(Err(ConnError::Closed));
                }
            };
            loop {
                loop {
                    match sluice_protocol::frame::take_frame(&mut buf, RESPONSE_BYTES_MAX) {
                        Ok(Some(frame)) => {
                            let next = p.locked().pop_front();
                            let Some((key, version, cid, tx)) = next else {
                                fail(&p);
                                return;
                            };
                            let result = api::decode_response(key, version, frame.freeze())
                                .map_err(ConnError::Protocol)
                                .and_then(|(got, body)| {
                                    if got == cid {
                                        Ok(body)
                                    } else {
                                        Err(ConnError::Protocol(format!("correlation id {got}, expected {cid}")))
                                    }
                                });
                            let _ = tx.send(result);
                        }
                        Ok(None) => break,
                        Err(_) => {
                            fail(&p);
                            return;
                        }
                    }
                }
                match rd.read_buf(&mut buf).await {
                    Ok(0) | Err(_) => {
                        fail(&p);
                        return;
                    }
                    Ok(_) => {}
                }
            }
        });
        Ok(Connection {
            writer: tokio::sync::Mutex::new(wr),
            socket,
            pending,
            next_id: AtomicI32::new(1),
            window: Arc::new(Semaphore::new(inflight_max.max(1))),
            client_id: client_id.to_string(),
            closed,
        })
    }

    /// Mark the connection failed and shut its socket; outstanding requests fail.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        // Shut the socket (the broker sees EOF, the reader task ends and fails what is pending).
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
    }

    /// True once the connection has failed or the broker closed it; make a new one.
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Send a request and wait for its response (waits for a window slot first).
    pub async fn call(&self, key: ApiKey, version: i16, body: RequestKind) -> Result<ResponseKind, ConnError> {
        let rx = self.send(key, version, body).await?;
        rx.await.map_err(|_| ConnError::Closed)?
    }

    /// Send a request that gets no response (produce with acks=0).
    pub async fn send_oneway(&self, key: ApiKey, version: i16, body: RequestKind) -> Result<(), ConnError> {
        let (_, frame) = self.frame(key, version, &body)?;
        self.writer.lock().await.write_all(&frame).await?;
        Ok(())
    }

    /// A new correlation id and the encoded request frame.
    fn frame(&self, key: ApiKey, version: i16, body: &RequestKind) -> Result<(i32, Bytes), ConnError> {
        let cid = self.next_id.fetch_add(1, Ordering::Relaxed);
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(cid)
            .with_client_id(Some(StrBytes::from_string(self.client_id.clone())));
        let frame = api::encode_request(&header, body).map_err(ConnError::Protocol)?.freeze();
        Ok((cid, frame))
    }

    /// Send a request; the returned receiver yields its response. Holds a window slot until
    /// the response arrives.
    pub async fn send(
        &self,
        key: ApiKey,
        version: i16,
        body: RequestKind,
    ) -> Result<oneshot::Receiver<Result<ResponseKind, ConnError>>, ConnError> {
        let permit = self.window.clone().acquire_owned().await.map_err(|_| ConnError::Closed)?;
        let (cid, frame) = self.frame(key, version, &body)?;
        let (tx, rx) = oneshot::channel();
        let (tx2, rx2) = oneshot::channel();
        {
            let mut w = self.writer.lock().await;
            if self.is_closed() {
                return Err(ConnError::Closed);
            }
            self.pending.locked().push_back((key, version, cid, tx));
            if self.is_closed() {
                // The reader may have drained the queue before our push: answer it ourselves.
                for (_, _, _, tx) in self.pending.locked().drain(..) {
                    let _ = tx.send(Err(ConnError::Closed));
                }
            }
            if let Err(e) = w.write_all(&frame).await {
                self.closed.store(true, Ordering::Release);
                return Err(e.into());
            }
        }
        tokio::spawn(async move {
            let r = rx.await.unwrap_or(Err(ConnError::Closed));
            drop(permit);
            let _ = tx2.send(r);
        });
        Ok(rx2)
    }
}
