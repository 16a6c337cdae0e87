//! `sluice`: the broker binary. `sluice` alone starts a single node on 127.0.0.1:9092 with
//! data in ./sluice-data. Every setting: `sluice --help`. This file is flags → config → run;
//! `sluice_broker::broker` builds and wires the services.

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
    cmd.subcommand(
        Command::new("raft-log-dump")
            .about("Print a Raft log directory's entries as JSON lines (read-only)")
            .arg(
                Arg::new("dir")
                    .value_name("DIR")
                    .required(true)
                    .help("the group's directory, e.g. sluice-data/__cluster"),
            )
            .arg(
                Arg::new("kind")
                    .long("kind")
                    .value_parser(["metadata", "partition", "shard"])
                    .help("the group's kind [default: from the directory's name]"),
            ),
    )
}

/// `sluice raft-log-dump DIR [--kind K]`.
fn raft_log_dump(m: &clap::ArgMatches) -> ExitCode {
    use sluice_broker::cluster::store::{dump, GroupKind};
    let Some(dir) = m.get_one::<String>("dir").map(std::path::PathBuf::from) else { return ExitCode::from(2) };
    let kind = match m.get_one::<String>("kind").map(String::as_str) {
        Some("metadata") => GroupKind::Metadata,
        Some("partition") => GroupKind::Partition,
        Some(_) => GroupKind::Shard,
        None => GroupKind::of(&dir),
    };
    let stdout = std::io::stdout();
    match dump(&dir, kind, &mut stdout.lock()) {
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: cannot read the Raft log in {}: {e}", dir.display());
            ExitCode::from(1)
        }
    }
}

/// Sluice's own lines at INFO; openraft's at WARN (its INFO lines — about 100 per broker at start,
/// thousands under load — would bury Sluice's). `SLUICE_LOG` (an `EnvFilter`) overrides both,
/// e.g. `SLUICE_LOG=info,openraft=info`.
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn";

/// openraft's lines that each repeat one failed Raft RPC (four or five per failure: 2,600 lines
/// in 10 s with one peer stopped) are left out: `cluster::rpc_health` logs one line per failing
/// peer every 10 s instead. A `SLUICE_LOG` that names `openraft` keeps them.
fn init_logs(json: bool) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    use tracing_subscriber::Layer;
    let given = std::env::var("SLUICE_LOG").ok();
    let filter = tracing_subscriber::EnvFilter::try_from_env("SLUICE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG_FILTER));
    let keep_per_rpc = given.is_some_and(|g| g.contains("openraft"));
    let per_rpc = tracing_subscriber::filter::filter_fn(move |m| {
        keep_per_rpc || !sluice_broker::cluster::rpc_health::is_per_rpc_noise(m)
    });
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let registry = tracing_subscriber::registry().with(filter);
    if json {
        registry.with(fmt.json().with_filter(per_rpc)).init();
    } else {
        registry.with(fmt.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).with_filter(per_rpc)).init();
    }
}

/// glibc's malloc gives threads arenas of their own (up to eight per core); under a saturating
/// replicated load the freed buffers they keep held a partition leader at 319–426 MiB of RSS,
/// against 122–276 MiB with two arenas (decision 0027). glibc reads `MALLOC_ARENA_MAX` only at
/// start, so unless the environment sets it, the broker starts itself again (same process:
/// `exec`) with `MALLOC_ARENA_MAX=2`.
fn limit_malloc_arenas() {
    use std::os::unix::process::CommandExt as _;
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let Ok(exe) = std::env::current_exe() else { return };
    let err = std::process::Command::new(exe).args(std::env::args_os().skip(1)).env("MALLOC_ARENA_MAX", "2").exec();
    // only returns on failure: carry on with glibc's default arenas
    eprintln!("sluice: could not restart with MALLOC_ARENA_MAX=2 ({err}); using glibc's default malloc arenas");
}

fn main() -> ExitCode {
    limit_malloc_arenas();
    let matches = cli().get_matches();
    if let Some(("raft-log-dump", m)) = matches.subcommand() {
        return raft_log_dump(m);
    }
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
        match sluice_broker::broker::Broker::start(config).await {
            Ok(broker) => {
                broker.run(shutdown_signal()).await;
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("sluice: {e}");
                ExitCode::from(e.exit_code())
            }
        }
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
