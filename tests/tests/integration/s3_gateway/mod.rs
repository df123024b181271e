//! The S3 gateway end to end: a real S3 client (`aws-sdk-s3`) against the
//! `om-s3` binary over a 3-node om with authentication on. The gateway
//! holds IMPERSONATE and acts for the credential's user, so om's ACLs and
//! audit log see that user. `objects`: every operation a gateway serves;
//! `faults`: a leader kill during a multipart upload, and lifecycle;
//! `headers`: conditional writes, stored headers, request ids, presigned
//! URL bounds;
//! `large`: a 5 GiB multipart object with declared parts; `stores`: blocks
//! kept in an S3 bucket instead of a directory; `clients`: s3cmd, rclone,
//! restic, the AWS CLI and boto3 with their defaults; `refusals`: what
//! nobody authenticated can cost (POST forms, silent sockets); `forms`:
//! signed POST forms, streamed and held to their policy.

mod behaviour;
mod clients;
mod faults;
mod forms;
mod headers;
mod large;
mod objects;
mod refusals;
mod stores;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};
use aws_sdk_s3::presigning::PresigningConfig;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    BucketVersioningStatus, CompletedMultipartUpload, CompletedPart, Delete, ObjectIdentifier, Tag,
    Tagging, VersioningConfiguration,
};
use md5::Digest;
use om_client::v1::*;
use om_client::{ClientOptions, OmClient};
use om_tests::{ClusterOptions, MemberAddrs, TestCluster, free_port, wait_for};

const OPS: &str = "omt_000000000000000a_ops-secret-ops-secret-ops-secret-ops";
const ALICE: &str = "omt_000000000000000b_alice-secret-alice-secret-alice-secret";
const GW: &str = "omt_000000000000000d_gw-secret-gw-secret-gw-secret-gw-secret";

struct Env {
    /// Before `dir`: the members stop before their files go.
    members: TestCluster,
    dir: tempfile::TempDir,
    addrs: Vec<MemberAddrs>,
    gateway: Child,
    url: String,
}

impl Drop for Env {
    fn drop(&mut self) {
        let _ = self.gateway.kill();
        let _ = self.gateway.wait();
    }
}

impl Env {
    fn om(&self, token: &str) -> OmClient {
        let eps: Vec<String> = self.addrs.iter().map(|a| a.grpc.clone()).collect();
        OmClient::new(
            &eps,
            ClientOptions {
                deadline: Duration::from_secs(15),
                token: Some(token.to_string()),
                ..Default::default()
            },
        )
        .unwrap()
    }

    /// A new S3 credential of `user`, made through om with `token` (the
    /// user's own or an admin's): its access key and secret.
    async fn s3_secret(&self, token: &str, user: &str) -> (String, String) {
        let made = self
            .om(token)
            .create_s3_secret(CreateS3SecretRequest {
                user: user.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        (made.credential.unwrap().access_key, made.secret_key)
    }

    /// `om-s3` over the members as the gateway principal, with `args` and
    /// `envs` added.
    fn gateway_command(&self, listen: &str, args: &[&str], envs: &[(&str, &str)]) -> Command {
        let endpoints: Vec<String> = self.addrs.iter().map(|a| a.grpc.clone()).collect();
        let mut c = Command::new(om_tests::binary("om-s3"));
        c.args(["--endpoint", &endpoints.join(",")])
            .args(["--listen", listen])
            .args(args)
            .envs(envs.iter().copied())
            .env("OM_TOKEN", GW)
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        c
    }

    /// A gateway started by `gateway_command` and listening: the process and
    /// its URL.
    async fn start_gateway(&self, args: &[&str], envs: &[(&str, &str)]) -> (Child, String) {
        let listen = format!("127.0.0.1:{}", free_port());
        let child = self
            .gateway_command(&listen, args, envs)
            .spawn()
            .expect("start om-s3");
        wait_for(Duration::from_secs(30), "the gateway to listen", || {
            let listen = listen.clone();
            async move { tokio::net::TcpStream::connect(listen).await.ok() }
        })
        .await;
        (child, format!("http://{listen}"))
    }

    /// Volume `name`, owned by ops, in which alice may create, list and
    /// read buckets.
    async fn volume_for_alice(&self, name: &str) {
        let ops = self.om(OPS);
        ops.create_volume(name, "ops").await.unwrap();
        ops.set_acl(SetAclRequest {
            volume: name.into(),
            mode: AclMode::Add as i32,
            grants: vec![AclGrant {
                kind: GranteeKind::User as i32,
                name: "alice".into(),
                rights: vec![
                    AclRight::Create as i32,
                    AclRight::List as i32,
                    AclRight::Read as i32,
                ],
            }],
            ..Default::default()
        })
        .await
        .unwrap();
    }

    fn blocks(&self) -> PathBuf {
        self.dir.path().join("blocks")
    }

    /// Every block file the gateway holds.
    fn block_files(&self) -> Vec<PathBuf> {
        fn walk(p: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(p).into_iter().flatten().flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, out);
                } else if !p.file_name().unwrap().to_string_lossy().starts_with('.') {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.blocks(), &mut out);
        out
    }

    /// Where the gateway keeps block `id`.
    fn block_path(&self, id: u64) -> PathBuf {
        self.blocks()
            .join(format!("{:02x}", id & 0xff))
            .join(format!("{id:016x}"))
    }

    fn audit_lines(&self) -> Vec<String> {
        (1..=self.addrs.len())
            .flat_map(|id| {
                std::fs::read_to_string(self.dir.path().join(format!("audit-{id}.log")))
                    .unwrap_or_default()
                    .lines()
                    .map(str::to_string)
                    .collect::<Vec<_>>()
            })
            .collect()
    }
}

/// Three om members with tokens (ops an admin, gw the gateway's principal,
/// also an admin as its block reclamation needs, alice a user) and `om-s3`
/// in front of them.
async fn env() -> Env {
    env_with(|_| {}).await
}

async fn env_with(tweak: impl Fn(&mut om::config::Args) + Send + Sync + 'static) -> Env {
    env_opts(tweak, &[]).await
}

/// `env_with`, and `gateway_args` added to the gateway's command line.
async fn env_opts(
    tweak: impl Fn(&mut om::config::Args) + Send + Sync + 'static,
    gateway_args: &[&str],
) -> Env {
    let dir = tempfile::tempdir().unwrap();
    let tokens = om_tests::token_file(
        dir.path(),
        &[("ops", OPS, ""), ("alice", ALICE, ""), ("gw", GW, "")],
    );
    let audit_dir = dir.path().to_path_buf();
    let options = ClusterOptions::default().tweak(move |id, args| {
        args.token_file = Some(tokens.clone());
        args.insecure = true;
        // The gateway is no admin: it is granted IMPERSONATE and RECLAIM
        // below, what deploy/ grants it.
        args.admins = Some("ops".to_string());
        args.audit_log = Some(audit_dir.join(format!("audit-{id}.log")));
        tweak(args);
    });
    // Started, the members have a leader.
    let members = TestCluster::start_with(3, options).await;
    let addrs = members.addrs().to_vec();
    let mut env = Env {
        members,
        gateway: Command::new("true").spawn().unwrap(),
        url: String::new(),
        dir,
        addrs,
    };
    let ops = env.om(OPS);
    ops.set_acl(SetAclRequest {
        mode: AclMode::Add as i32,
        grants: vec![AclGrant {
            kind: GranteeKind::User as i32,
            name: "gw".into(),
            rights: vec![AclRight::Impersonate as i32, AclRight::Reclaim as i32],
        }],
        ..Default::default()
    })
    .await
    .unwrap();
    // The gateways' volumes, owned by ops; alice may create buckets in them.
    env.volume_for_alice("s3v").await;
    let _ = env.gateway.wait();
    let blocks = env.blocks();
    let mut args = vec![
        "--blocks",
        blocks.to_str().unwrap(),
        "--volume",
        "s3v",
        "--secret-cache-seconds",
        "1",
    ];
    args.extend_from_slice(gateway_args);
    let (gateway, url) = env.start_gateway(&args, &[]).await;
    (env.gateway, env.url) = (gateway, url);
    env
}

fn s3(url: &str, key: &str, secret: &str) -> Client {
    let conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(url)
        .credentials_provider(Credentials::new(key, secret, None, None, "test"))
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    Client::from_conf(conf)
}

/// The S3 error code and HTTP status of a failed call.
fn code<E: ProvideErrorMetadata, R: std::fmt::Debug>(
    r: Result<impl std::fmt::Debug, SdkError<E, R>>,
) -> (String, u16) {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => {
            let status = match &e {
                SdkError::ServiceError(s) => {
                    let raw: &R = s.raw();
                    format!("{raw:?}")
                }
                _ => String::new(),
            };
            let http = status
                .split("status: StatusCode(")
                .nth(1)
                .and_then(|s| s.get(..3))
                .and_then(|s| s.parse().ok())
                .unwrap_or(0);
            (e.code().unwrap_or("").to_string(), http)
        }
    }
}

/// Sets `bucket`'s versioning to `status`.
async fn set_versioning(c: &Client, bucket: &str, status: BucketVersioningStatus) {
    c.put_bucket_versioning()
        .bucket(bucket)
        .versioning_configuration(VersioningConfiguration::builder().status(status).build())
        .send()
        .await
        .unwrap();
}

/// The environment of a gateway whose `s3://` block store is the S3
/// service at `url`, reached with these keys.
fn block_store_env<'a>(
    url: &'a str,
    key: &'a str,
    secret: &'a str,
) -> [(&'static str, &'a str); 5] {
    [
        ("AWS_ENDPOINT", url),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_REGION", "us-east-1"),
        ("AWS_ACCESS_KEY_ID", key),
        ("AWS_SECRET_ACCESS_KEY", secret),
    ]
}

/// Uploads `parts` as parts 1, 2, ... of upload `id` of `bucket`/`key`;
/// answers the parts to list at completion, in order.
async fn upload_parts(
    c: &Client,
    bucket: &str,
    key: &str,
    id: &str,
    parts: &[Vec<u8>],
) -> Vec<CompletedPart> {
    let mut done = Vec::new();
    for (n, p) in (1..).zip(parts) {
        let r = c
            .upload_part()
            .bucket(bucket)
            .key(key)
            .upload_id(id)
            .part_number(n)
            .body(ByteStream::from(p.clone()))
            .send()
            .await
            .unwrap();
        done.push(
            CompletedPart::builder()
                .part_number(n)
                .e_tag(r.e_tag().unwrap())
                .build(),
        );
    }
    done
}

fn md5_hex(b: &[u8]) -> String {
    format!("{:x}", md5::Md5::digest(b))
}

async fn body(c: &Client, bucket: &str, key: &str) -> Vec<u8> {
    c.get_object()
        .bucket(bucket)
        .key(key)
        .send()
        .await
        .unwrap()
        .body
        .collect()
        .await
        .unwrap()
        .into_bytes()
        .to_vec()
}

/// A plain HTTP/1.1 GET of `url`: the status and the body.
async fn http_get(url: &str) -> (u16, String) {
    http_request("GET", url).await
}

/// A plain HTTP/1.1 request of `url`: the status and the whole answer.
async fn http_request(method: &str, url: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").unwrap();
    let (host, path) = rest.split_at(rest.find('/').unwrap());
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.write_all(
        format!("{method} {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text[9..12].parse().unwrap();
    (status, text)
}
