//! `om-s3`: the S3 gateway of om (see the library's documentation).

use std::process::ExitCode;

use clap::Parser;
use tracing_subscriber::EnvFilter;

fn init_logging() {
    let asked = std::env::var("OM_LOG")
        .ok()
        .filter(|f| EnvFilter::try_new(f).is_ok())
        .or_else(|| std::env::var("RUST_LOG").ok());
    let filter = om_s3::logging::filter(asked.as_deref());
    match std::env::var("OM_LOG_FORMAT").as_deref() {
        Ok("json") => tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_env_filter(filter)
            .init(),
        _ => tracing_subscriber::fmt().with_env_filter(filter).init(),
    }
}

/// Resolves on SIGINT or SIGTERM.
async fn shutdown_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    let cfg = om_s3::Config::parse();
    let running = match om_s3::start(cfg).await {
        Ok(r) => r,
        Err(e) => {
            tracing::error!("{e:#}");
            return ExitCode::FAILURE;
        }
    };
    shutdown_signal().await;
    tracing::info!("stopping: finishing requests in flight");
    running.stop().await;
    ExitCode::SUCCESS
}
