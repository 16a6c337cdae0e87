//! `sluice`: the broker binary. `sluice` alone starts a single node on 127.0.0.1:9092 with
//! data in ./sluice-data. Every setting: `sluice --help`.

use clap::{Arg, ArgAction, Command};
use sluice_broker::config::{self, SETTINGS};
use std::collections::BTreeMap;
use std::process::ExitCode;

fn cli() -> Command {
    let mut cmd = Command::new("sluice")
        .about("Sluice: a Kafka-compatible transactional log broker")
        .version(env!("CARGO_PKG_VERSION"))
        .arg(Arg::new("config").long("config").value_name("FILE").help("TOML file of settings (Kafka names as keys)"));
    for s in SETTINGS {
        let default_note = if s.default.is_empty() { String::new() } else { format!(" [default: {}]", s.default) };
        cmd = cmd.arg(
            Arg::new(s.name).long(config::flag_name(s.name)).value_name("VALUE").action(ArgAction::Set).help(format!(
                "{}{} (env {})",
                s.help,
                default_note,
                config::env_name(s.name)
            )),
        );
    }
    cmd
}

fn init_logs(json: bool) {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    if json {
        builder.json().init();
    } else {
        builder.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).init();
    }
}

fn main() -> ExitCode {
    let matches = cli().get_matches();
    let flags: BTreeMap<String, String> = SETTINGS
        .iter()
        .filter_map(|s| matches.get_one::<String>(s.name).map(|v| (s.name.to_string(), v.clone())))
        .collect();
    let env: BTreeMap<String, String> = std::env::vars().filter(|(k, _)| k.starts_with("SLUICE_")).collect();
    let file = match matches.get_one::<String>("config") {
        Some(path) => match std::fs::read_to_string(path) {
            Ok(t) => Some(t),
            Err(e) => {
                eprintln!("sluice: cannot read config file {path}: {e}");
                return ExitCode::from(2);
            }
        },
        None => None,
    };
    let config = match config::resolve(&flags, &env, file.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("sluice: {e}");
            return ExitCode::from(2);
        }
    };
    init_logs(config.log_json);
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("sluice: cannot start runtime: {e}");
            return ExitCode::from(1);
        }
    };
    runtime.block_on(async move {
        if let Some(addr) = config.metrics_listener {
            if let Some(handle) = sluice_broker::metrics::install() {
                if let Err(e) = sluice_broker::metrics::serve(addr, handle).await {
                    eprintln!("sluice: cannot serve metrics on {addr}: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        let state = match tokio::task::block_in_place(|| sluice_broker::state::BrokerState::open(config)) {
            Ok(s) => s,
            Err(e) => {
                eprintln!("sluice: {e}");
                return ExitCode::from(1);
            }
        };
        let state = std::sync::Arc::new(state);
        if !state.config.voters.is_empty() {
            let id = state.config.node_id as u64;
            let dir = state.data_dir().join("__cluster");
            // What this broker brings into the cluster: everything it had on its first join (so
            // a single node's ACLs and users are not lost), only its bootstrap users after that.
            let first_join = !dir.exists();
            let bootstrap: Vec<&str> = state.config.security.bootstrap_users.iter().map(|(u, _)| u.as_str()).collect();
            let upserts: Vec<_> = state
                .security
                .credentials
                .export()
                .into_iter()
                .filter(|(u, _)| first_join || bootstrap.contains(&u.as_str()))
                .flat_map(|(u, creds)| creds.into_iter().map(move |(m, c)| (u.clone(), m, c)))
                .collect();
            let imported_acls = if first_join { state.security.acls.all() } else { Vec::new() };
            let own = state.config.controller_listener.clone();
            match sluice_broker::cluster::ClusterNode::start(id, state.config.voters.clone(), own, &dir).await {
                Ok(node) => {
                    let _ = state.cluster.set(node.clone());
                    if let Err(e) = sluice_broker::cluster::spawn_reconciler(&state, node.clone(), &dir) {
                        eprintln!("sluice: metadata quorum: {e}");
                        return ExitCode::from(1);
                    }
                    sluice_broker::cluster::reassign::spawn_membership_driver(&node);
                    if let Err(e) =
                        sluice_broker::txn::TxnCoordinator::enable_replication(&state, &node, &dir.join("replicas"))
                            .await
                    {
                        eprintln!("sluice: transaction log replication: {e}");
                        return ExitCode::from(1);
                    }
                    if let Err(e) =
                        sluice_broker::group::GroupCoordinator::enable_replication(&state, &node, &dir.join("replicas"))
                            .await
                    {
                        eprintln!("sluice: offsets log replication: {e}");
                        return ExitCode::from(1);
                    }
                    state.producer_ids.use_source(std::sync::Arc::new(sluice_broker::cluster::QuorumBlocks(
                        node.clone(),
                        state.config.node_id,
                    )));
                    let l = &state.config.listeners[0];
                    let cmd = sluice_broker::cluster::Command::RegisterBroker {
                        node_id: state.config.node_id,
                        host: l.advertised_host.clone(),
                        port: l.advertised_port,
                        cluster_id: state.cluster_id.clone(),
                    };
                    tokio::spawn(async move {
                        use sluice_broker::cluster::Command;
                        let hour = std::time::Duration::from_secs(3600);
                        match node.write(cmd, hour).await {
                            Ok(_) => tracing::info!("registered with the metadata quorum"),
                            Err(e) => tracing::error!("could not register with the metadata quorum: {e}"),
                        }
                        if !imported_acls.is_empty() {
                            if let Err(e) = node.write(Command::CreateAcls { acls: imported_acls }, hour).await {
                                tracing::error!("could not bring this broker's ACLs into the cluster: {e}");
                            }
                        }
                        if !upserts.is_empty() {
                            let cmd = Command::AlterCredentials { upserts, deletes: vec![], only_if_absent: true };
                            if let Err(e) = node.write(cmd, hour).await {
                                tracing::error!("could not bring this broker's users into the cluster: {e}");
                            }
                        }
                    });
                }
                Err(e) => {
                    eprintln!("sluice: metadata quorum: {e}");
                    return ExitCode::from(1);
                }
            }
        }
        let mut bound = Vec::new();
        for l in &state.config.listeners {
            let runtime = match sluice_broker::server::ListenerRuntime::new(l, &state.config.security) {
                Ok(r) => r,
                Err(e) => {
                    eprintln!("sluice: listener {}: {e}", l.name);
                    return ExitCode::from(2);
                }
            };
            match tokio::net::TcpListener::bind(l.addr).await {
                Ok(socket) => bound.push((socket, runtime)),
                Err(e) => {
                    eprintln!("sluice: cannot listen on {} ({}): {e}", l.addr, l.name);
                    return ExitCode::from(1);
                }
            }
        }
        for l in &state.config.listeners {
            tracing::info!("sluice listening on {} ({}, {:?})", l.addr, l.name, l.protocol);
        }
        tracing::info!("data in {}, cluster id {}", state.data_dir().display(), state.cluster_id);
        sluice_broker::server::run(state, bound, shutdown_signal()).await;
        ExitCode::SUCCESS
    })
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        std::future::pending::<()>().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => {},
        _ = int.recv() => {},
    }
}
