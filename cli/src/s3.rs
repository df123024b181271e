//! `omctl s3 secret create|show|list|revoke`: S3 credentials, replicated in
//! om, for S3 gateways (`om-s3`) to verify signatures with; `new-key` and
//! `rotate-key`: the keys om seals them under at rest.
//!
//! `create USER --output json` prints `access_key` and `secret_key`, the
//! pair an S3 client is configured with (`aws configure`, boto3).

use anyhow::Result;
use om_client::OmClient;
use om_client::v1::*;
use serde_json::{Value, json};

use crate::Output;
use crate::output::iso_time;

#[derive(clap::Subcommand)]
pub enum S3Cmd {
    /// S3 credentials: create, show, list, revoke.
    #[command(subcommand)]
    Secret(SecretCmd),
}

#[derive(clap::Subcommand)]
pub enum SecretCmd {
    /// Makes a credential acting for USER (yourself unless you are an admin).
    Create {
        user: String,
        /// The user's groups, comma-separated (admins only).
        #[arg(long, value_delimiter = ',')]
        groups: Vec<String>,
    },
    /// Shows a credential with its secret key (its user, an admin or a
    /// holder of IMPERSONATE).
    Show { access_key: String },
    /// Lists credentials without their secrets: USER's, or yours, or (for
    /// an admin, with no USER) everyone's.
    List {
        user: Option<String>,
        /// Page through every credential.
        #[arg(long)]
        all: bool,
        #[arg(long, default_value_t = 0)]
        max: u32,
        #[arg(long, default_value = "")]
        start_after: String,
    },
    /// Revokes a credential; gateways refuse it within their cache time.
    Revoke { access_key: String },
    /// Prints a new secrets key line, `ID HEX`, for om's
    /// `--secrets-key-file` (made here, from the OS's randomness; nothing is
    /// sent). Put it first in the file to seal new secrets under it.
    NewKey { id: String },
    /// Seals every stored secret under the current (first) key of
    /// `--secrets-key-file` (admins only); afterwards older keys may leave
    /// the file.
    RotateKey,
}

fn credential_json(c: &S3Credential) -> Value {
    crate::output::with_iso_times(json!({
        "access_key": c.access_key,
        "user": c.user,
        "groups": c.groups,
        "created_ms": c.created_ms,
    }))
}

fn print_credential(out: Output, c: &S3Credential, secret: Option<&str>) {
    if out == Output::Json {
        let mut v = credential_json(c);
        if let (Some(s), Value::Object(m)) = (secret, &mut v) {
            m.insert("secret_key".into(), Value::String(s.to_string()));
        }
        println!("{v}");
        return;
    }
    println!("access_key: {}", c.access_key);
    if let Some(s) = secret {
        println!("secret_key: {s}");
    }
    println!("user:       {}", c.user);
    if !c.groups.is_empty() {
        println!("groups:     {}", c.groups.join(","));
    }
    println!("created:    {}", iso_time(c.created_ms));
}

/// A key file line: `id` and 32 random bytes in hex.
fn new_key_line(id: &str) -> Result<String> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    if !ok {
        anyhow::bail!("a key id is 1 to 64 characters of [A-Za-z0-9._-]");
    }
    let mut key = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut key)
        .map_err(|_| anyhow::anyhow!("no randomness from the OS"))?;
    Ok(format!("{id} {}", hex::encode(key)))
}

pub async fn run(c: &OmClient, out: Output, cmd: S3Cmd) -> Result<()> {
    let S3Cmd::Secret(cmd) = cmd;
    match cmd {
        SecretCmd::NewKey { id } => println!("{}", new_key_line(&id)?),
        SecretCmd::RotateKey => {
            let r = c
                .rotate_s3_secret_key(RotateS3SecretKeyRequest::default())
                .await?;
            if out == Output::Json {
                println!(
                    "{}",
                    json!({"key_id": r.key_id, "resealed": r.resealed,
                        "unchanged": r.unchanged, "unreadable": r.unreadable})
                );
            } else {
                println!(
                    "key {}: {} sealed anew, {} already under it",
                    r.key_id, r.resealed, r.unchanged
                );
            }
            if !r.unreadable.is_empty() {
                anyhow::bail!(
                    "sealed under a key the file lacks (give it back to read them): {}",
                    r.unreadable.join(" ")
                );
            }
        }
        SecretCmd::Create { user, groups } => {
            let r = c
                .create_s3_secret(CreateS3SecretRequest {
                    user,
                    groups,
                    ..Default::default()
                })
                .await?;
            print_credential(out, &r.credential.unwrap_or_default(), Some(&r.secret_key));
        }
        SecretCmd::Show { access_key } => {
            let r = c
                .get_s3_secret(GetS3SecretRequest {
                    access_key,
                    ..Default::default()
                })
                .await?;
            print_credential(out, &r.credential.unwrap_or_default(), Some(&r.secret_key));
        }
        SecretCmd::Revoke { access_key } => {
            let r = c
                .revoke_s3_secret(RevokeS3SecretRequest {
                    access_key,
                    ..Default::default()
                })
                .await?;
            print_credential(out, &r.credential.unwrap_or_default(), None);
        }
        SecretCmd::List {
            user,
            all,
            max,
            start_after,
        } => {
            let mut after = start_after;
            let mut items = Vec::new();
            let truncated = loop {
                let r = c
                    .list_s3_secrets(ListS3SecretsRequest {
                        user: user.clone().unwrap_or_default(),
                        start_after: after.clone(),
                        max_results: max,
                        ..Default::default()
                    })
                    .await?;
                if let Some(last) = r.credentials.last() {
                    after = last.access_key.clone();
                }
                items.extend(r.credentials);
                if !(all && r.truncated) {
                    break r.truncated;
                }
            };
            if out == Output::Json {
                let v: Vec<Value> = items.iter().map(credential_json).collect();
                println!("{}", json!({"credentials": v, "truncated": truncated}));
                return Ok(());
            }
            println!(
                "{:<20}  {:<24}  {:<29}  GROUPS",
                "ACCESS KEY", "USER", "CREATED"
            );
            for i in &items {
                println!(
                    "{:<20}  {:<24}  {:<29}  {}",
                    i.access_key,
                    i.user,
                    iso_time(i.created_ms),
                    i.groups.join(",")
                );
            }
            if truncated {
                println!("(more after {after}: --start-after {after}, or --all)");
            }
        }
    }
    Ok(())
}
