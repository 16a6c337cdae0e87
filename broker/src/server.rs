//! The accept loop: a connection limit (`max.connections`), one task per connection, and
//! graceful shutdown on SIGTERM/SIGINT (stop accepting, let connections finish their pending
//! answers, then flush and close every log cleanly).

use crate::state::BrokerState;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

pub async fn run(state: BrokerState, listener: TcpListener, shutdown_signal: impl std::future::Future<Output = ()>) {
    let state = Arc::new(state);
    let limit = Arc::new(Semaphore::new(state.config.max_connections));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut conns = tokio::task::JoinSet::new();
    let background = tokio::spawn(crate::background::run(state.clone(), stop_rx.clone()));
    tokio::pin!(shutdown_signal);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        tracing::warn!("accept failed: {e}");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = limit.clone().try_acquire_owned() else {
                    tracing::warn!(%peer, "refusing connection: max.connections reached");
                    drop(socket);
                    continue;
                };
                let st = state.clone();
                let rx = stop_rx.clone();
                conns.spawn(async move {
                    crate::connection::handle(st, socket, rx).await;
                    drop(permit);
                });
                while conns.try_join_next().is_some() {}
            }
            _ = &mut shutdown_signal => break,
        }
    }
    tracing::info!("shutting down");
    drop(listener);
    let _ = stop_tx.send(true);
    let _ = tokio::time::timeout(Duration::from_secs(10), async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    let _ = background.await;
    match Arc::try_unwrap(state) {
        Ok(state) => tokio::task::block_in_place(|| state.shutdown()),
        Err(state) => {
            tracing::warn!("requests still running at shutdown; flushing without a clean marker");
            for t in state.topics() {
                for p in &t.partitions {
                    let _ = p.flush();
                }
            }
        }
    }
    tracing::info!("stopped");
}
