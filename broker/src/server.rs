//! The accept loops: one per listener, connection limits (`max.connections` in total,
//! `max.connections.per.ip` per client address), one task per connection, and graceful
//! shutdown on SIGTERM/SIGINT (stop accepting, let connections finish their pending answers,
//! then flush and close every log cleanly).

use crate::connection::ListenerRuntime;
use crate::services::Services;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch, Semaphore};

/// Serve `listeners` (bound sockets with their runtime settings) until `shutdown_signal`.
pub async fn run(
    state: Arc<Services>,
    listeners: Vec<(TcpListener, ListenerRuntime)>,
    shutdown_signal: impl std::future::Future<Output = ()>,
) {
    let limit = Arc::new(Semaphore::new(state.config.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let background = tokio::spawn(crate::background::run(crate::background::Background::of(&state), stop_rx.clone()));
    let (accepted_tx, mut accepted) = mpsc::channel::<(TcpStream, std::net::SocketAddr, Arc<ListenerRuntime>)>(64);
    let mut acceptors = tokio::task::JoinSet::new();
    for (listener, runtime) in listeners {
        let (tx, runtime) = (accepted_tx.clone(), Arc::new(runtime));
        acceptors.spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((socket, peer)) => {
                        if tx.send((socket, peer, runtime.clone())).await.is_err() {
                            return;
                        }
                    }
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        });
    }
    drop(accepted_tx);
    tokio::pin!(shutdown_signal);
    loop {
        tokio::select! {
            next = accepted.recv() => {
                let Some((socket, peer, runtime)) = next else { break };
                let Some(ip_permit) = state.security.admit(peer.ip()) else {
                    tracing::warn!(%peer, "refusing connection: max.connections.per.ip reached");
                    drop(socket);
                    continue;
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "refusing connection: max.connections reached");
                    drop(socket);
                    continue;
                };
                let st = state.clone();
                let rx = stop_rx.clone();
                conns.spawn(async move {
                    crate::connection::handle(st, socket, runtime, rx).await;
                    drop(permit);
                    drop(ip_permit);
                });
                while conns.try_join_next().is_some() {}
            }
            _ = &mut shutdown_signal => break,
        }
    }
    tracing::info!("shutting down");
    acceptors.abort_all();
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    let _ = background.await;
    match Arc::try_unwrap(state) {
        Ok(state) => tokio::task::block_in_place(|| state.shutdown()),
        Err(state) => {
            tracing::warn!("requests still running at shutdown; flushing without a clean marker");
            state.topics.flush_all();
        }
    }
    tracing::info!("stopped");
}
