//! One client connection: the only code that touches the socket. Frames in, responses out,
//! in request order.
//!
//! The reader decodes each frame and runs its stage 1 (`dispatch`) in order; answers that
//! need waiting (durability, long polls) run as their own tasks. A writer task takes answers
//! from a bounded queue in request order and writes them, so pipelined requests are answered
//! in order while their waits overlap (produce requests share fsyncs). The queue bound is the
//! per-connection in-flight limit.
//!
//! Bad input: a frame over `socket.request.max.bytes`, an unknown API key, or a malformed
//! header/body closes the connection (after earlier answers are written); an unsupported
//! version of ApiVersions is answered v0-style with UNSUPPORTED_VERSION and the supported
//! ranges; other unsupported versions close the connection, as Kafka does.

use crate::handlers::Reply;
use crate::metrics;
use crate::pipeline::dispatch::dispatch_from;
use crate::security::quota::Kind;
use crate::security::sasl::{SaslServer, Step};
use crate::security::{tls, Session, ANONYMOUS};
use crate::services::Services;
use bytes::{Bytes, BytesMut};
use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use sluice_protocol::api::{self, DecodeError};
use sluice_protocol::frame::take_frame;
use std::sync::Arc;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A listener as served: its settings and, for SSL/SASL_SSL, the TLS acceptor.
pub struct ListenerRuntime {
    pub config: Arc<crate::config::security::ListenerConfig>,
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

impl ListenerRuntime {
    /// Build the runtime form of `config` (the TLS configuration from the PEM files).
    pub fn new(
        config: &crate::config::security::ListenerConfig,
        security: &crate::config::security::SecuritySettings,
    ) -> anyhow::Result<ListenerRuntime> {
        let tls = if config.protocol.tls() {
            Some(tokio_rustls::TlsAcceptor::from(crate::security::tls::server_config(security)?))
        } else {
            None
        };
        Ok(ListenerRuntime { config: Arc::new(config.clone()), tls })
    }
}

/// Requests whose answers may be pending at once on one connection.
pub const INFLIGHT_REQUESTS_MAX: usize = 64;

/// Connections accepted so far: the first half of every request id (`<connection>-<correlation>`).
static CONNECTIONS_SEEN: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// What the writer needs to know of a request to meter and log it.
struct Meta {
    key: ApiKey,
    version: i16,
    request_id: String,
    client_id: String,
    started: std::time::Instant,
}

enum Out {
    Ready(Vec<Bytes>, Meta),
    Pending(tokio::task::JoinHandle<Option<Vec<Bytes>>>, Meta),
}

/// APIs that wait by design (long polls, rebalances) and so are never "slow".
fn waits_by_design(key: ApiKey) -> bool {
    matches!(key, ApiKey::Fetch | ApiKey::JoinGroup | ApiKey::SyncGroup)
}

/// Record data in a response, which the encoder must not copy (zero-copy fetch).
fn shared_records(body: &ResponseKind) -> Vec<Bytes> {
    match body {
        ResponseKind::Fetch(r) => {
            r.responses.iter().flat_map(|t| t.partitions.iter().filter_map(|p| p.records.clone())).collect()
        }
        _ => Vec::new(),
    }
}

fn encode(key: ApiKey, version: i16, correlation_id: i32, body: &ResponseKind) -> Option<Vec<Bytes>> {
    match api::encode_response_chunked(key, version, correlation_id, body, shared_records(body)) {
        Ok(b) => Some(b),
        Err(e) => {
            tracing::error!("cannot encode {key:?} v{version} response: {e}");
            None
        }
    }
}

/// Write every chunk with vectored writes (log data goes from the page cache to the socket
/// without an intermediate copy in the broker).
async fn write_chunks<W: AsyncWrite + Unpin>(wr: &mut W, chunks: &[Bytes]) -> std::io::Result<()> {
    const IOV_MAX: usize = 64;
    let (mut idx, mut off) = (0usize, 0usize);
    while idx < chunks.len() {
        let slices: Vec<std::io::IoSlice<'_>> = chunks[idx..]
            .iter()
            .take(IOV_MAX)
            .enumerate()
            .map(|(i, c)| std::io::IoSlice::new(if i == 0 { &c[off..] } else { &c[..] }))
            .collect();
        let mut n = wr.write_vectored(&slices).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        while n > 0 && idx < chunks.len() {
            let rest = chunks[idx].len() - off;
            if n >= rest {
                n -= rest;
                idx += 1;
                off = 0;
            } else {
                off += n;
                n = 0;
            }
        }
        while idx < chunks.len() && chunks[idx].len() == off {
            idx += 1;
            off = 0;
        }
    }
    Ok(())
}

/// Serve one accepted socket on `listener`: the TLS handshake first on SSL listeners, then
/// requests until the client leaves, the connection fails, or the broker stops.
pub async fn handle(
    state: Arc<Services>,
    socket: TcpStream,
    listener: Arc<ListenerRuntime>,
    shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let peer = socket.peer_addr().ok();
    let _ = socket.set_nodelay(true);
    let mut session =
        Session { principal: ANONYMOUS.to_string(), peer, listener: listener.config.clone(), peer_broker: false };
    match &listener.tls {
        None => serve(state, socket, session, shutdown).await,
        Some(acceptor) => {
            let stream = match tokio::time::timeout(std::time::Duration::from_secs(10), acceptor.accept(socket)).await {
                Ok(Ok(s)) => s,
                Ok(Err(e)) => {
                    tracing::debug!(?peer, "TLS handshake failed: {e}");
                    return;
                }
                Err(_) => {
                    tracing::debug!(?peer, "TLS handshake timed out");
                    return;
                }
            };
            if let Some(p) = stream.get_ref().1.peer_certificates().and_then(|c| c.first()).and_then(tls::principal_of)
            {
                session.principal = p;
            }
            serve(state, stream, session, shutdown).await
        }
    }
}

/// Milliseconds since `base` (the connection's clock for throttling).
fn ms_since(base: std::time::Instant) -> i64 {
    base.elapsed().as_millis() as i64
}

async fn serve<S: AsyncRead + AsyncWrite + Send + Unpin + 'static>(
    state: Arc<Services>,
    stream: S,
    mut session: Session,
    mut shutdown: tokio::sync::watch::Receiver<bool>,
) {
    let peer = session.peer;
    let conn_id = CONNECTIONS_SEEN.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let slow = std::time::Duration::from_millis(state.config.slow_request_ms);
    ::metrics::gauge!(metrics::CONNECTIONS).increment(1.0);
    let _gauge = ConnectionGauge;
    let (mut rd, mut wr) = tokio::io::split(stream);
    let mut sasl = session.listener.protocol.sasl().then(SaslServer::default);
    // Quotas: the reader reads nothing more until this (ms since `clock`) has passed.
    let clock = std::time::Instant::now();
    let muted_until = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let (tx, mut rx) = mpsc::channel::<Out>(INFLIGHT_REQUESTS_MAX);
    let writer = tokio::spawn(async move {
        while let Some(out) = rx.recv().await {
            let (chunks, meta) = match out {
                Out::Ready(b, meta) => (b, meta),
                Out::Pending(h, meta) => match h.await {
                    Ok(Some(b)) => (b, meta),
                    // An answer that cannot be produced (encode error, a panicked task): skipping
                    // it would shift every later answer onto the wrong request, so close instead.
                    Ok(None) | Err(_) => {
                        tracing::error!(request_id = %meta.request_id, api = ?meta.key, version = meta.version,
                            client_id = %meta.client_id, ?peer, "request failed: no answer could be produced; closing");
                        break;
                    }
                },
            };
            if write_chunks(&mut wr, &chunks).await.is_err() {
                break;
            }
            let elapsed = meta.started.elapsed();
            if elapsed >= slow && !waits_by_design(meta.key) {
                tracing::warn!(request_id = %meta.request_id, api = ?meta.key, version = meta.version,
                    client_id = %meta.client_id, ?peer, elapsed_ms = elapsed.as_millis() as u64, "slow request");
            }
            let api = format!("{:?}", meta.key);
            ::metrics::counter!(metrics::REQUESTS_TOTAL, "api" => api.clone()).increment(1);
            ::metrics::histogram!(metrics::REQUEST_SECONDS, "api" => api).record(elapsed.as_secs_f64());
            ::metrics::counter!(metrics::BYTES_OUT_TOTAL).increment(chunks.iter().map(|c| c.len() as u64).sum());
        }
        let _ = wr.shutdown().await;
    });
    let mut frame_max = if sasl.is_some() {
        state.config.request_bytes_max.min(state.security.settings.sasl_max_receive)
    } else {
        state.config.request_bytes_max
    };
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let idle = std::time::Duration::from_millis(state.security.settings.connections_max_idle_ms);
    'conn: loop {
        loop {
            let wait = muted_until.load(std::sync::atomic::Ordering::Relaxed) - ms_since(clock);
            if wait > 0 {
                tokio::time::sleep(std::time::Duration::from_millis(wait as u64)).await;
            }
            let frame = match take_frame(&mut buf, frame_max) {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(?peer, "closing: {e}");
                    break 'conn;
                }
            };
            ::metrics::counter!(metrics::BYTES_IN_TOTAL).increment(frame.len() as u64 + 4);
            let frame_len = frame.len() + 4;
            let req = match api::decode_request(frame.freeze()) {
                Ok(r) => r,
                Err(DecodeError::UnsupportedVersion { key: ApiKey::ApiVersions, correlation_id, .. }) => {
                    let body = ResponseKind::ApiVersions(crate::handlers::api_versions::response(
                        ResponseError::UnsupportedVersion.code(),
                        state.config.txns.version,
                    ));
                    if let Some(b) = encode(ApiKey::ApiVersions, 0, correlation_id, &body) {
                        let meta = Meta {
                            key: ApiKey::ApiVersions,
                            version: 0,
                            request_id: format!("{conn_id}-{correlation_id}"),
                            client_id: String::new(),
                            started: std::time::Instant::now(),
                        };
                        if tx.send(Out::Ready(b, meta)).await.is_err() {
                            break 'conn;
                        }
                    }
                    continue;
                }
                Err(e) => {
                    let request_id = match &e {
                        DecodeError::UnsupportedVersion { correlation_id, .. }
                        | DecodeError::Malformed { correlation_id, .. } => format!("{conn_id}-{correlation_id}"),
                        _ => format!("{conn_id}-?"),
                    };
                    tracing::warn!(%request_id, ?peer, "request failed: {e}; closing the connection");
                    break 'conn;
                }
            };
            let (key, version, correlation_id) = (req.api_key, req.version(), req.correlation_id());
            let meta = Meta {
                key,
                version,
                request_id: format!("{conn_id}-{correlation_id}"),
                client_id: req.header.client_id.as_ref().map(|c| c.to_string()).unwrap_or_default(),
                started: std::time::Instant::now(),
            };
            if let Some(auth) = sasl.as_mut() {
                let step = match &req.body {
                    RequestKind::ApiVersions(_) => None,
                    RequestKind::SaslHandshake(r) => Some(auth.handshake(&state.security, r)),
                    RequestKind::SaslAuthenticate(r) => Some(auth.authenticate(&state.security, r)),
                    _ => {
                        tracing::warn!(request_id = %meta.request_id, api = ?key, ?peer,
                            "request before SASL authentication; closing the connection");
                        break 'conn;
                    }
                };
                if let Some(step) = step {
                    let (body, close) = match step {
                        Step::Continue(b) => (b, false),
                        Step::Authenticated(b, principal) => {
                            tracing::debug!(?peer, %principal, "authenticated");
                            session.principal = principal;
                            sasl = None;
                            frame_max = state.config.request_bytes_max;
                            (b, false)
                        }
                        Step::Fail(b) => {
                            tracing::info!(?peer, request_id = %meta.request_id, "SASL authentication failed; closing");
                            (b, true)
                        }
                    };
                    let Some(bytes) = encode(key, version, correlation_id, &body) else { break 'conn };
                    if tx.send(Out::Ready(bytes, meta)).await.is_err() || close {
                        break 'conn;
                    }
                    continue;
                }
            }
            let produce_throttle = if key == ApiKey::Produce && state.security.quotas.enabled(Kind::Produce) {
                let t = state.security.quotas.record(Kind::Produce, &meta.client_id, frame_len as u64);
                if t > 0 {
                    muted_until.store(ms_since(clock) + i64::from(t), std::sync::atomic::Ordering::Relaxed);
                }
                t
            } else {
                0
            };
            // stage 1, awaited before the next request is read: requests keep their order
            let reply = dispatch_from(&state, req, &session).await;
            let reply = match reply {
                Some(r) if produce_throttle > 0 => Some(with_throttle(r, move |_| produce_throttle)),
                Some(r) if key == ApiKey::Fetch && state.security.quotas.enabled(Kind::Fetch) => {
                    let (st, client, muted) = (state.clone(), meta.client_id.clone(), muted_until.clone());
                    Some(with_throttle(r, move |body| {
                        let bytes: usize = shared_records(body).iter().map(|b| b.len()).sum();
                        let t = st.security.quotas.record(Kind::Fetch, &client, bytes as u64);
                        if t > 0 {
                            muted.store(ms_since(clock) + i64::from(t), std::sync::atomic::Ordering::Relaxed);
                        }
                        t
                    }))
                }
                other => other,
            };
            let out = match reply {
                None => {
                    tracing::error!(request_id = %meta.request_id, api = ?key, version, "request failed (its handler failed); closing");
                    break 'conn;
                }
                Some(Reply::None) => continue,
                Some(Reply::Now(body)) => match encode(key, version, correlation_id, &body) {
                    Some(b) => Out::Ready(b, meta),
                    None => {
                        tracing::error!(request_id = %meta.request_id, api = ?key, version, "request failed: answer not encodable; closing");
                        break 'conn;
                    }
                },
                Some(Reply::Later(fut)) => {
                    Out::Pending(tokio::spawn(async move { encode(key, version, correlation_id, &fut.await) }), meta)
                }
            };
            if tx.send(out).await.is_err() {
                break 'conn;
            }
        }
        tokio::select! {
            n = rd.read_buf(&mut buf) => match n {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            },
            _ = shutdown.changed() => break,
            _ = tokio::time::sleep(idle) => {
                tracing::debug!(?peer, "closing an idle connection (connections.max.idle.ms)");
                break;
            }
        }
    }
    drop(tx);
    let _ = writer.await;
}

/// Set `throttle_time_ms` (Produce, Fetch) on an answer, computed from the answer itself.
fn with_throttle(reply: Reply, throttle: impl FnOnce(&ResponseKind) -> i32 + Send + 'static) -> Reply {
    fn set(body: &mut ResponseKind, t: i32) {
        match body {
            ResponseKind::Produce(r) => r.throttle_time_ms = r.throttle_time_ms.max(t),
            ResponseKind::Fetch(r) => r.throttle_time_ms = r.throttle_time_ms.max(t),
            _ => {}
        }
    }
    match reply {
        Reply::Now(mut body) => {
            let t = throttle(&body);
            set(&mut body, t);
            Reply::Now(body)
        }
        Reply::Later(fut) => Reply::Later(Box::pin(async move {
            let mut body = fut.await;
            let t = throttle(&body);
            set(&mut body, t);
            body
        })),
        Reply::None => Reply::None,
    }
}

/// Decrements the connection gauge however the connection ends.
struct ConnectionGauge;
impl Drop for ConnectionGauge {
    fn drop(&mut self) {
        ::metrics::gauge!(metrics::CONNECTIONS).decrement(1.0);
    }
}
