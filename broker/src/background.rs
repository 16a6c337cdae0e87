//! Periodic work: the log cleaner's loop (`cleaner`), the scrubber's (`scrubber`), interval flushes (`log.flush.policy=interval`), recovery-point checkpoints,
//! retention (`log.retention.check.interval.ms`), group timers (at each deadline: join/sync
//! deadlines, session expiry), offset expiry with offsets-log compaction
//! (`offsets.retention.check.interval.ms`), and transaction timeouts with transaction-log
//! compaction (`transaction.abort.timed.out.transaction.cleanup.interval.ms`).

use crate::config::Config;
use crate::group::GroupCoordinator;
use crate::services::Services;
use crate::topics::TopicRegistry;
use crate::txn::TxnCoordinator;
use sluice_storage::FlushPolicy;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// What the periodic work is given: the partitions and the two coordinators, and its settings.
#[derive(Clone)]
pub struct Background {
    pub topics: Arc<TopicRegistry>,
    pub groups: Arc<GroupCoordinator>,
    pub txns: Arc<TxnCoordinator>,
    pub settings: Settings,
}

/// The settings of the periodic work (from the broker's `Config`).
#[derive(Clone)]
pub struct Settings {
    /// `log.flush.policy`: with `interval`, how often every partition is flushed.
    pub flush: FlushPolicy,
    /// `log.retention.check.interval.ms`
    pub retention_check_interval_ms: u64,
    /// `producer.id.expiration.ms`
    pub producer_id_expiration_ms: i64,
    /// `transaction.abort.timed.out.transaction.cleanup.interval.ms`
    pub txn_check_interval_ms: u64,
    /// `offsets.retention.check.interval.ms`
    pub offsets_check_interval_ms: u64,
    /// `log.cleaner.*`
    pub cleaner: crate::config::CleanerSettings,
    /// `log.scrub.bytes.per.second`
    pub scrub_bytes_per_second: u64,
}

impl Settings {
    pub fn of(config: &Config) -> Settings {
        Settings {
            flush: config.log.flush,
            retention_check_interval_ms: config.retention_check_interval_ms,
            producer_id_expiration_ms: config.producer_id_expiration_ms,
            txn_check_interval_ms: config.txns.abort_check_interval_ms,
            offsets_check_interval_ms: config.offsets_retention_check_interval_ms,
            cleaner: config.cleaner.clone(),
            scrub_bytes_per_second: config.scrub_bytes_per_second,
        }
    }
}

impl Background {
    /// The handles `services` holds.
    pub fn of(services: &Services) -> Background {
        Background {
            topics: services.topics.clone(),
            groups: services.groups.clone(),
            txns: services.txns.clone(),
            settings: Settings::of(&services.config),
        }
    }
}

pub async fn run(state: Background, mut stop: watch::Receiver<bool>) {
    let flush_every = match state.settings.flush {
        FlushPolicy::Interval { interval_ms } => Duration::from_millis(interval_ms),
        FlushPolicy::Sync => Duration::from_secs(60),
    };
    let mut flush_tick = tokio::time::interval(flush_every);
    let mut retention_tick = tokio::time::interval(Duration::from_millis(state.settings.retention_check_interval_ms));
    let mut gauges_tick = tokio::time::interval(Duration::from_secs(1));
    // Every task started here holds handles to the services; all of them end before `run`
    // returns, so that shutdown finds the topics unshared and closes them cleanly.
    let mut tasks = tokio::task::JoinSet::new();
    // group timers run in their own task, so the disk work below (flushes, retention,
    // compaction) never makes one late
    tasks.spawn(group_timers(state.groups.clone(), stop.clone()));
    tasks.spawn(crate::cleaner::run(state.topics.clone(), state.settings.cleaner.clone(), stop.clone()));
    let shard_logs = [crate::coordinator::scrubbed_logs(&state.groups), crate::coordinator::scrubbed_logs(&state.txns)];
    tasks.spawn(crate::scrubber::run(
        state.topics.clone(),
        shard_logs.concat(),
        state.settings.scrub_bytes_per_second,
        stop.clone(),
    ));
    tasks.spawn({
        let txns = state.txns.clone();
        async move { txns.recover().await }
    });
    let mut txn_tick = tokio::time::interval(Duration::from_millis(state.settings.txn_check_interval_ms));
    let mut offsets_tick = tokio::time::interval(Duration::from_millis(state.settings.offsets_check_interval_ms));
    loop {
        tokio::select! {
            _ = flush_tick.tick() => {
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    for t in st.topics.topics() {
                        for p in &t.partitions {
                            if let Err(e) = p.flush() {
                                tracing::error!(topic = %t.name, partition = p.index, "flush failed: {e}");
                            }
                        }
                    }
                }).await;
            }
            _ = retention_tick.tick() => {
                let st = state.clone();
                let now = crate::clock::now_ms();
                let _ = tokio::task::spawn_blocking(move || {
                    for t in st.topics.topics() {
                        for p in &t.partitions {
                            let expired = p.expire_producers(now, st.settings.producer_id_expiration_ms);
                            if expired > 0 {
                                tracing::info!(topic = %t.name, partition = p.index, "expired {expired} idle producers");
                            }
                            match p.log().enforce_retention(now) {
                                Ok(0) => {}
                                Ok(n) => tracing::info!(topic = %t.name, partition = p.index, "retention deleted {n} segments"),
                                Err(e) => tracing::error!(topic = %t.name, partition = p.index, "retention failed: {e}"),
                            }
                        }
                    }
                }).await;
            }
            _ = txn_tick.tick() => {
                while tasks.try_join_next().is_some() {}
                let st = state.clone();
                tasks.spawn(async move { st.txns.check_timeouts().await });
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || st.txns.compact_logs(crate::clock::now_ms())).await;
            }
            _ = offsets_tick.tick() => {
                let st = state.clone();
                let _ = tokio::task::spawn_blocking(move || st.groups.maintain(crate::clock::now_ms())).await;
            }
            _ = gauges_tick.tick() => {
                state.groups.record_gauges();
                state.txns.record_gauges(crate::clock::now_ms());
                let now = crate::clock::now_ms();
                for t in state.topics.topics() {
                    for p in &t.partitions {
                        p.record_gauges();
                        if let Some(c) = p.cleaning_status(now) {
                            let labels = [("topic", t.name.clone()), ("partition", p.index.to_string())];
                            ::metrics::gauge!(crate::metrics::CLEANER_DIRTY_RATIO, &labels).set(c.dirty_ratio);
                            let lag = c.oldest_dirty_ms.filter(|_| c.dirty_bytes > 0).map_or(0, |t| (now - t).max(0));
                            ::metrics::gauge!(crate::metrics::CLEANER_LAG_SECONDS, &labels).set(lag as f64 / 1000.0);
                        }
                    }
                }
            }
            _ = stop.changed() => break,
        }
    }
    // the timers, the cleaner and the scrubber end on `stop`; a transaction timeout check or
    // the coordinator's recovery may be waiting on a marker: they are cut off (their work is
    // redone at the next start, as after a crash)
    let all_ended = async { while tasks.join_next().await.is_some() {} };
    if tokio::time::timeout(STOP_GRACE, all_ended).await.is_err() {
        tasks.abort_all();
        while tasks.join_next().await.is_some() {}
    }
}

/// How long shutdown waits for the background tasks before cutting them off.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Group timers fire at their deadline: the task sleeps until the earliest one, waking at least
/// every 100 ms to pick up deadlines set by requests since (each is a session or rebalance
/// timeout away, so it is seen well before it is due).
async fn group_timers(groups: Arc<GroupCoordinator>, mut stop: watch::Receiver<bool>) {
    loop {
        for d in groups.tick(crate::clock::now_ms()) {
            tokio::spawn(d.finish());
        }
        let wait = groups.next_deadline().map_or(100, |due| (due - crate::clock::now_ms()).clamp(1, 100));
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(wait.unsigned_abs())) => {}
            _ = stop.changed() => break,
        }
    }
}
