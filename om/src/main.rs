//! The `om` binary: parse configuration, set up logging, run a node until
//! SIGINT or SIGTERM.

use clap::Parser;
use om::config::{Args, Config};
use om::server::Node;
use tracing_subscriber::EnvFilter;

/// openraft logs its whole internal state at INFO and every failed RPC to a
/// peer at WARN (heartbeats every interval, replication on every retry).
/// om logs one line per event instead: leadership changes (`metrics::raft`),
/// a peer becoming unreachable and coming back (the Raft network). So by
/// default openraft logs warnings only, and those per-RPC modules errors
/// only. `OM_LOG` / `RUST_LOG` replace the whole filter.
const DEFAULT_LOG_FILTER: &str = "info,openraft=warn,openraft::core::heartbeat=error,\
    openraft::replication=error,openraft::engine::handler::replication_handler=error";

/// mimalloc instead of glibc's malloc for om's own allocations: under load
/// glibc spent a fifth of the leader's CPU in malloc and free (consolidating
/// fastbins, unlinking chunks); see BENCHMARKS.md, "Several writes per entry".
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    // No transparent huge pages for this process: mimalloc commits its
    // arenas eagerly, and with THP on ("always") every first touch of a 2 MiB
    // region made it resident whole (+34 MiB of RSS on an idle node).
    // SAFETY: prctl with PR_SET_THP_DISABLE only sets a flag of this process.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
    // Everything om creates (store files, snapshots, the audit log) is for
    // om's user only.
    // SAFETY: umask only sets the process's file-mode creation mask.
    unsafe {
        libc::umask(0o077);
    }
    let mut args = Args::parse();
    let command = args.command.take();
    let filter = EnvFilter::try_from_env("OM_LOG")
        .or_else(|_| EnvFilter::try_from_default_env())
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_LOG_FILTER));
    match args.log_format.as_deref() {
        Some("json") => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_env_filter(filter)
            .init(),
        _ => tracing_subscriber::fmt().with_env_filter(filter).init(),
    }
    // Descriptors are budgeted from the limit (see `om::descriptors`): take all
    // the process may have before anything is opened.
    match om::descriptors::raise_nofile_limit() {
        Ok((before, after)) => tracing::info!(before, after, "open-file limit"),
        Err(e) => tracing::warn!(error = %e, "cannot raise the open-file limit"),
    }
    let cfg = match Config::load(args) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("om: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    if let Some(om::config::Command::Restore(r)) = command {
        let target = match (&r.archive_log, r.to_index, &r.to_time) {
            (Some(a), Some(index), _) => om::restore::Target::Index {
                archive: a.clone(),
                index,
            },
            (Some(a), None, Some(t)) => match om::restore::parse_time(t) {
                Ok(ms) => om::restore::Target::Time {
                    archive: a.clone(),
                    ms,
                },
                Err(e) => {
                    eprintln!("om restore: {e}");
                    return std::process::ExitCode::from(2);
                }
            },
            (Some(_), None, None) => {
                eprintln!("om restore: --archive-log needs --to-index or --to-time");
                return std::process::ExitCode::from(2);
            }
            (None, ..) => om::restore::Target::Backup,
        };
        return match om::restore::restore(&cfg, &r.from, &target) {
            Ok(done) => {
                let m = &done.manifest;
                println!(
                    "restored backup {} (cluster {}, index {}, taken {} by node {}) to index {} \
                     from {} into {} as node {} of a new cluster; start om on it with the same \
                     --initial-cluster",
                    m.id,
                    m.cluster_id,
                    m.applied_index,
                    m.created,
                    m.node_id,
                    done.applied_index,
                    done.from.display(),
                    cfg.data_dir.display(),
                    cfg.node_id
                );
                std::process::ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("om restore: {e}");
                std::process::ExitCode::FAILURE
            }
        };
    }
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("om: cannot start runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    rt.block_on(async move {
        let node = match Node::start(cfg).await {
            Ok(n) => n,
            Err(e) => {
                eprintln!("om: {e}");
                return std::process::ExitCode::FAILURE;
            }
        };
        match node.run_until(shutdown_signal()).await {
            Ok(()) => std::process::ExitCode::SUCCESS,
            Err(why) => {
                eprintln!("om: {why}");
                std::process::ExitCode::FAILURE
            }
        }
    })
}

async fn shutdown_signal() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(_) => {
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_log_filter_parses() {
        tracing_subscriber::EnvFilter::try_new(super::DEFAULT_LOG_FILTER).unwrap();
    }
}
