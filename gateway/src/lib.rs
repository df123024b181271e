//! om-s3: a stateless S3 gateway over om, as Ozone's s3g is over Ozone
//! Manager. S3 REST in front (s3s: SigV4, presigned URLs, aws-chunked
//! bodies, XML), om for every piece of metadata (through `om_client`,
//! acting as the user behind each request's access key), and object data in
//! a block store, one file per om block.
//!
//! Any number of gateways can serve one om cluster and block store: all
//! state is om's or the store's. One of them (`--reclaim`) frees the blocks
//! om releases.
//!
//! `start` runs a gateway in-process (what the binary and tests do).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use hyper_util::rt::{TokioExecutor, TokioIo};
use om_client::OmClient;
use om_tls::net::{LimitedListener, PortPolicy};
use s3s::service::S3ServiceBuilder;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

pub mod auth;
pub mod blocks;
pub mod config;
pub mod errors;
mod form;
mod front;
mod host;
mod http;
mod length;
pub mod logging;
mod post;
pub mod reclaim;
pub mod s3;
mod scope;
mod uri;

pub use config::Config;

use blocks::BlockStore;

/// How long `start` keeps trying to reach om for the volume.
const STARTUP_DEADLINE: Duration = Duration::from_secs(60);
/// How long a stopping gateway lets requests in flight finish.
const DRAIN: Duration = Duration::from_secs(30);

/// A running gateway.
pub struct Running {
    addr: SocketAddr,
    http_addr: Option<SocketAddr>,
    stop: watch::Sender<bool>,
    tasks: JoinSet<()>,
}

impl Running {
    /// Where the S3 API listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where `/healthz` and `/metrics` are served, with `--http`.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// Stops accepting, lets requests in flight finish (up to 30 s), and
    /// stops the background tasks.
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        while self.tasks.join_next().await.is_some() {}
    }
}

/// Creates the gateway's volume unless it exists (an admin gateway), or
/// checks that it does. om may still be starting: unavailability is retried
/// for a while.
async fn ensure_volume(om: &OmClient, volume: &str) -> Result<()> {
    let started = std::time::Instant::now();
    loop {
        let owner = match om.who_am_i().await {
            Ok(w) if !w.user.is_empty() => w.user,
            Ok(_) => "om-s3".to_string(),
            Err(e)
                if e.code() == tonic::Code::Unavailable && started.elapsed() < STARTUP_DEADLINE =>
            {
                tracing::warn!(error = %e, "om is not reachable yet");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            Err(e) => return Err(e).context("asking om who the gateway is"),
        };
        return match om.create_volume(volume, &owner).await {
            Ok(_) => {
                tracing::info!(volume, owner, "created the volume");
                Ok(())
            }
            Err(e) if e.reason() == "VOLUME_ALREADY_EXISTS" => Ok(()),
            // A gateway is no admin (it holds IMPERSONATE and RECLAIM): an
            // admin makes its volume, which it may not even read.
            Err(e) if e.code() == tonic::Code::PermissionDenied => {
                match om.get_volume(volume).await {
                    Ok(_) => Ok(()),
                    Err(g) if g.code() == tonic::Code::PermissionDenied => {
                        tracing::info!(
                            volume,
                            "the gateway may not create or read the volume; an admin made it"
                        );
                        Ok(())
                    }
                    Err(_) => bail!(
                        "volume {volume} does not exist and the gateway may not create it: {e}"
                    ),
                }
            }
            Err(e) => Err(e).with_context(|| format!("creating volume {volume}")),
        };
    }
}

/// How long a request's head may take to arrive, and a kept-alive
/// connection may wait for its next request.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serves S3 on `listener` until `stop` turns true, then drains. The port is
/// om's kind (`om_tls::net`): capped, one source at most an eighth of the
/// connections, a connection that sends nothing or goes idle closed, and a
/// request's head due within `HEADER_READ_TIMEOUT`.
async fn serve(
    mut listener: LimitedListener,
    front: front::Front,
    mut stop: watch::Receiver<bool>,
) {
    let closer = listener.closer();
    let mut conns = JoinSet::new();
    loop {
        let stream = tokio::select! {
            (s, _) = listener.accept_limited() => s,
            _ = stop.changed() => break,
        };
        let front = front.clone();
        let mut stop = stop.clone();
        conns.spawn(async move {
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder
                .http1()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT);
            let conn = builder.serve_connection(TokioIo::new(stream), front);
            tokio::pin!(conn);
            tokio::select! {
                r = conn.as_mut() => {
                    if let Err(e) = r {
                        tracing::debug!(error = %e, "connection ended with an error");
                    }
                    return;
                }
                _ = stop.changed() => {}
            }
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        });
        while conns.try_join_next().is_some() {}
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, async { while conns.join_next().await.is_some() {} }).await;
    closer.close();
}

/// Starts a gateway: connects to om, makes sure the volume exists, opens
/// the block store, and serves S3 (and, with `--http`, health and metrics).
pub async fn start(cfg: Config) -> Result<Running> {
    let om = Arc::new(OmClient::new(
        &config::endpoints(&cfg.endpoint)?,
        cfg.client_options()?,
    )?);
    ensure_volume(&om, &cfg.volume).await?;
    start_with(cfg, om).await
}

/// `start` with a given om client and without making sure the volume
/// exists (for a program that manages the volume itself).
pub async fn start_with(cfg: Config, om: Arc<OmClient>) -> Result<Running> {
    let location = cfg.block_location()?;
    let store: Arc<dyn BlockStore> = location.open().await?;
    let auth = auth::Auth::new(om.clone(), Duration::from_secs(cfg.secret_cache_seconds));
    let mut builder = S3ServiceBuilder::new(s3::OmS3::new(
        auth.clone(),
        store.clone(),
        cfg.volume.clone(),
    ));
    builder.set_auth(auth::SecretLookup(auth.clone()));
    // POST forms: s3s would read a signed form's file into memory; the
    // front end checks and streams them itself (see `post` and `form`), so
    // s3s never parses one. Uploads without a length are held to
    // `--post-memory-bytes` (`length`).
    let post_budget = post::Budget::new(cfg.post_memory_bytes);
    let mut limits = s3s::config::S3Config::default();
    limits.post_object_max_file_size = post_budget.bytes();
    limits.form_max_field_size = post::MAX_FORM_FIELDS_BYTES;
    limits.form_max_fields_size = post::MAX_FORM_FIELDS_BYTES;
    limits.form_max_parts = post::MAX_FORM_PARTS + 1;
    builder.set_config(Arc::new(s3s::config::StaticConfigProvider::new(Arc::new(
        limits,
    ))));
    let domains = cfg.domains();
    let domains = (!domains.is_empty()).then(|| Arc::new(host::Domains::new(domains)));
    if let Some(d) = &domains {
        builder.set_host(host::Shared(d.clone()));
    }
    let service = builder.build();

    let (stop, stopped) = watch::channel(false);
    let mut tasks = JoinSet::new();
    let mut http_addr = None;
    if let Some(a) = cfg.http {
        let prom = http::recorder();
        let l = TcpListener::bind(a)
            .await
            .with_context(|| format!("binding --http {a}"))?;
        http_addr = Some(l.local_addr()?);
        let policy = PortPolicy::new(
            "s3-http",
            http::MAX_CONNECTIONS,
            Duration::from_secs(cfg.idle_timeout_seconds.max(1)),
        );
        tasks.spawn(http::serve(
            LimitedListener::new(l, policy),
            prom,
            stopped.clone(),
        ));
    }
    let listener = TcpListener::bind(cfg.listen)
        .await
        .with_context(|| format!("binding --listen {}", cfg.listen))?;
    let addr = listener.local_addr()?;
    let policy = PortPolicy::new(
        "s3",
        cfg.max_connections,
        Duration::from_secs(cfg.idle_timeout_seconds.max(1)),
    );
    let front = front::Front {
        service,
        auth,
        allow_sigv2: cfg.allow_sigv2,
        post_budget,
        domains,
    };
    tasks.spawn(serve(
        LimitedListener::new(listener, policy),
        front,
        stopped.clone(),
    ));
    if cfg.reclaim {
        let every = Duration::from_secs(cfg.reclaim_seconds.max(1));
        tasks.spawn(reclaim::run(om, store, every, stopped));
    }
    tracing::info!(%addr, volume = %cfg.volume, blocks = %location, reclaim = cfg.reclaim, "serving S3");
    Ok(Running {
        addr,
        http_addr,
        stop,
        tasks,
    })
}
