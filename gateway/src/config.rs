//! Command line and environment of `om-s3`: every flag can also be given as
//! an environment variable (`OM_ENDPOINT`, `OM_S3_LISTEN`, ...), and the om
//! connection settings are omctl's.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use clap::Parser;
use om_client::ClientOptions;

use crate::blocks::Location;

// Not `Debug`: it holds the om bearer token.
#[derive(Parser, Clone)]
#[command(
    name = "om-s3",
    version,
    about = "S3 gateway of om: S3 REST in front, om for metadata, a block store for data"
)]
pub struct Config {
    /// om gRPC endpoint(s), comma-separated; the client finds the leader.
    #[arg(long, env = "OM_ENDPOINT", default_value = "127.0.0.1:9862")]
    pub endpoint: String,
    /// Address the S3 API listens on.
    #[arg(long, env = "OM_S3_LISTEN", default_value = "127.0.0.1:9878")]
    pub listen: SocketAddr,
    /// Where object data lives: a directory, a `file:///path` URL, or a
    /// bucket `s3://BUCKET[/PREFIX]`, `gs://...`, `az://CONTAINER[/PREFIX]`
    /// configured from the store's environment (`AWS_*`, `GOOGLE_*`,
    /// `AZURE_*`). Every gateway of one om cluster must use the same store.
    #[arg(long, env = "OM_S3_BLOCKS", default_value = "blocks")]
    pub blocks: String,
    /// The om volume that holds the S3 buckets (created at start if missing).
    #[arg(long, env = "OM_S3_VOLUME", default_value = "s3v")]
    pub volume: String,
    /// Base domain(s) for virtual-host style requests (`BUCKET.DOMAIN`),
    /// repeat or comma-separate; other hosts are path style.
    #[arg(long = "domain", env = "OM_S3_DOMAIN", value_delimiter = ',')]
    pub domains: Vec<String>,
    /// How long an access key's secret and user are cached, in seconds: the
    /// longest a revoked key keeps working on this gateway (0: ask om on
    /// every request).
    #[arg(long, env = "OM_S3_SECRET_CACHE_SECONDS", default_value_t = 10)]
    pub secret_cache_seconds: u64,
    /// Free the blocks om releases (list, delete, acknowledge). Enable it on
    /// at least one gateway of the om cluster (more only repeat the work);
    /// it needs the cluster right RECLAIM on om (`omctl acl add /
    /// user:om-s3:IMPERSONATE,RECLAIM`).
    #[arg(
        long,
        env = "OM_S3_RECLAIM",
        default_value_t = true,
        action = clap::ArgAction::Set
    )]
    pub reclaim: bool,
    /// Seconds between reclamation passes.
    #[arg(long, env = "OM_S3_RECLAIM_SECONDS", default_value_t = 5)]
    pub reclaim_seconds: u64,
    /// Optional HTTP address for `/healthz` and Prometheus `/metrics`.
    #[arg(long, env = "OM_S3_HTTP")]
    pub http: Option<SocketAddr>,
    /// Accept requests signed with AWS signature version 2 (off: refused
    /// with 403). SigV2 requests are then date-checked (15 minutes of skew)
    /// and their presigned URLs bounded to 7 days, as SigV4's; SigV2 POST
    /// forms are checked and streamed as SigV4 ones are.
    #[arg(long, env = "OM_S3_ALLOW_SIGV2", default_value_t = false)]
    pub allow_sigv2: bool,
    /// Most concurrent S3 connections; one past it is reset at once. One
    /// source address holds at most an eighth of them, and connections that
    /// have sent nothing yet at most a quarter (the oldest closed first).
    #[arg(long, env = "OM_S3_MAX_CONNECTIONS", default_value_t = 1024)]
    pub max_connections: usize,
    /// Bytes of PUTs without a Content-Length held in memory at once; also
    /// the largest one. POST forms, PUTs with a length and multipart
    /// uploads stream.
    /// [default: 256 MiB]
    #[arg(long, env = "OM_S3_POST_MEMORY_BYTES", default_value_t = 256 << 20)]
    pub post_memory_bytes: u64,
    /// A connection on which no byte moved for this many seconds is closed
    /// (longer than `--om-timeout`: a request waiting on om moves none).
    #[arg(long, env = "OM_S3_IDLE_TIMEOUT", default_value_t = 120)]
    pub idle_timeout_seconds: u64,
    /// Give up on an om call after this many seconds, retries included.
    #[arg(long, env = "OM_S3_OM_TIMEOUT", default_value_t = 30)]
    pub om_timeout: u64,
    /// PEM CA bundle that signed the om servers' certificates: connect over TLS.
    #[arg(long, env = "OM_CACERT")]
    pub cacert: Option<PathBuf>,
    /// PEM client certificate, for om servers that require mutual TLS.
    #[arg(long, env = "OM_CERT", requires = "key")]
    pub cert: Option<PathBuf>,
    /// PEM private key of `--cert`.
    #[arg(long, env = "OM_KEY", requires = "cert")]
    pub key: Option<PathBuf>,
    /// Bearer token for om servers started with `--token-file` (prefer the
    /// OM_TOKEN environment variable: a flag shows in the process list).
    #[arg(long, env = "OM_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
}

impl Config {
    /// The block store `--blocks` names.
    pub fn block_location(&self) -> Result<Location> {
        Location::parse(&self.blocks)
    }

    /// om client settings: TLS, token and deadline.
    pub fn client_options(&self) -> Result<ClientOptions> {
        Ok(ClientOptions {
            deadline: Duration::from_secs(self.om_timeout.max(1)),
            tls: self.tls()?,
            token: self.token.clone(),
            ..Default::default()
        })
    }

    fn tls(&self) -> Result<Option<Arc<om_tls::ClientTls>>> {
        if self.cacert.is_none() {
            if self.cert.is_some() {
                bail!("--cert needs --cacert, the CA that signed the servers' certificates");
            }
            return Ok(None);
        }
        let files = om_tls::TlsFiles {
            cert: self.cert.clone(),
            key: self.key.clone(),
            ca: self.cacert.clone(),
            crl: None,
        };
        Ok(Some(om_tls::ClientTls::load("om-s3", files)?))
    }

    /// The virtual-host base domains, trimmed, without empty entries.
    pub fn domains(&self) -> Vec<String> {
        self.domains
            .iter()
            .map(|d| d.trim().to_ascii_lowercase())
            .filter(|d| !d.is_empty())
            .collect()
    }
}

/// A clearer error than clap's for an endpoint list that is empty.
pub fn endpoints(s: &str) -> Result<Vec<String>> {
    let v: Vec<String> = s
        .split(',')
        .map(|e| e.trim().to_string())
        .filter(|e| !e.is_empty())
        .collect();
    if v.is_empty() {
        bail!("--endpoint names no om node");
    }
    Ok(v)
}

/// Parses the arguments of a test or an embedding program.
pub fn from_args<I, T>(args: I) -> Result<Config>
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    Config::try_parse_from(args).context("bad arguments")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_domains() {
        let c = from_args([
            "om-s3",
            "--domain",
            "s3.localhost, S3.Example.com",
            "--reclaim",
            "false",
        ])
        .unwrap();
        assert_eq!(c.domains(), vec!["s3.localhost", "s3.example.com"]);
        assert!(!c.reclaim);
        assert_eq!(c.volume, "s3v");
        assert_eq!(c.secret_cache_seconds, 10);
        assert_eq!(
            c.block_location().unwrap(),
            Location::Dir(PathBuf::from("blocks"))
        );
        assert_eq!(endpoints("a:1, b:2,").unwrap(), vec!["a:1", "b:2"]);
        assert!(endpoints(" , ").is_err());
    }
}
