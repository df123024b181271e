//! Who may talk to a node: TLS on its ports, tokens, the audit log and the
//! authenticator built from them.

use std::sync::Arc;

use super::{BoxError, NodeOptions};
use crate::audit::AuditLog;
use crate::config::Config;
use crate::grpc::auth::{Authenticator, TokenStore};

/// The TLS configurations of a node, all from `--tls-cert/--tls-key/--tls-ca`.
pub(super) struct NodeTls {
    /// The public gRPC port: client certificates required when a CA is set.
    pub grpc: Arc<om_tls::ServerTls>,
    /// The Raft port: mutual TLS, always.
    pub raft: Arc<om_tls::ServerTls>,
    /// This node as a client of the other members' Raft ports.
    pub peer: Arc<om_tls::ClientTls>,
}

impl NodeTls {
    fn load(cfg: &Config) -> Result<Option<Self>, BoxError> {
        if cfg.tls.cert.is_none() {
            return Ok(None);
        }
        // With a token file a client may bring a token instead of a certificate.
        let grpc_auth = match (&cfg.tls.ca, &cfg.token_file) {
            (Some(_), None) => om_tls::ClientAuth::Required,
            (Some(_), Some(_)) => om_tls::ClientAuth::Optional,
            (None, _) => om_tls::ClientAuth::None,
        };
        Ok(Some(NodeTls {
            grpc: om_tls::ServerTls::load("grpc", cfg.tls.clone(), grpc_auth)?,
            raft: om_tls::ServerTls::load("raft", cfg.tls.clone(), om_tls::ClientAuth::Required)?,
            peer: om_tls::ClientTls::load("raft-client", cfg.tls.clone())?,
        }))
    }
}

/// A node's security settings, loaded and checked before anything is opened.
pub(super) struct Security {
    pub tls: Option<NodeTls>,
    pub audit: Option<Arc<AuditLog>>,
    pub authenticator: Arc<Authenticator>,
    /// The keys S3 secrets are sealed under.
    pub keyring: Option<Arc<crate::secrets::Keyring>>,
}

impl Security {
    /// Loads certificates, tokens and the audit log, starts reloading the
    /// certificate and token files, and says in the log what is (and is not)
    /// protected.
    pub fn load(cfg: &Config, opts: &NodeOptions) -> Result<Security, BoxError> {
        let reload_every = opts.tls_reload_interval.unwrap_or(om_tls::RELOAD_INTERVAL);
        let tls = NodeTls::load(cfg)?;
        let tokens = match &cfg.token_file {
            Some(p) => Some(TokenStore::load(p)?),
            None => None,
        };
        let audit = match &cfg.audit_log {
            Some(p) => Some(Arc::new(
                AuditLog::open(p, cfg.audit_log_max_bytes, cfg.audit_log_keep, cfg.node_id)
                    .map_err(|e| format!("audit log {}: {e}", p.display()))?,
            )),
            None => None,
        };
        if let Some(t) = &tokens {
            om_tls::spawn_reload(t.clone(), reload_every);
        }
        let keyring = match &cfg.secrets_key_file {
            Some(p) => Some(crate::secrets::Keyring::load(p)?),
            None => None,
        };
        match &keyring {
            Some(k) => {
                om_tls::spawn_reload(k.clone(), reload_every);
                tracing::info!(key = k.keys().current(), "S3 secrets are sealed at rest");
            }
            None if cfg.insecure => tracing::warn!(
                "no --secrets-key-file: S3 secrets are stored in plain text (--insecure)"
            ),
            None => tracing::info!("no --secrets-key-file: creating S3 secrets is refused"),
        }
        let authenticator = Arc::new(Authenticator::new(
            cfg.tls.ca.is_some() || tokens.is_some(),
            tokens,
            audit.clone(),
        ));
        if authenticator.required {
            if cfg.admins.is_empty() {
                tracing::warn!(
                    "authentication is on but --admins is empty: only principals granted ALL \
                     on the cluster can create volumes or change the cluster ACL"
                );
            }
            tracing::info!(admins = ?cfg.admins, "requests are authorized against ACLs");
        } else {
            tracing::warn!(
                "no authentication (no --tls-ca, no --token-file): every caller may do everything"
            );
        }
        match &tls {
            Some(_) => tracing::info!(
                grpc_addr = %cfg.grpc_addr,
                raft_addr = %cfg.raft_addr,
                "TLS on the gRPC and Raft ports; the Raft port takes only members (mutual TLS)"
            ),
            None => tracing::warn!(
                grpc_addr = %cfg.grpc_addr,
                raft_addr = %cfg.raft_addr,
                "plaintext gRPC and Raft ports, without authentication: for development on \
                 loopback, or behind --insecure; see docs/security.md"
            ),
        }
        Ok(Security {
            tls,
            audit,
            authenticator,
            keyring,
        })
    }

    /// This node as a client of the other members' Raft ports.
    pub fn peer_tls(&self) -> Option<Arc<om_tls::ClientTls>> {
        self.tls.as_ref().map(|t| t.peer.clone())
    }

    /// Starts reloading the port certificates when their files change.
    pub fn reload_certificates(&self, opts: &NodeOptions) {
        let Some(t) = &self.tls else { return };
        for r in [
            t.grpc.clone() as Arc<dyn om_tls::Reloader>,
            t.raft.clone(),
            t.peer.clone(),
        ] {
            om_tls::spawn_reload(
                r,
                opts.tls_reload_interval.unwrap_or(om_tls::RELOAD_INTERVAL),
            );
        }
    }
}
