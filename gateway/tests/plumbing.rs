//! The gateway's HTTP plumbing, in-process and without an om cluster: the
//! listener, s3s's authentication in front of every operation, the answer
//! when om cannot be reached, and the health endpoint. (Operations against
//! a real om are exercised where om is built: the `tests` package.)

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Sends one HTTP/1.1 request; answers the status and the whole response.
async fn send(addr: SocketAddr, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(head.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), s.read_to_end(&mut out))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&out).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    (status, text)
}

#[tokio::test]
async fn requests_are_authenticated_before_om_is_asked() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = dir.path().join("blocks");
    let cfg = om_s3::config::from_args([
        "om-s3",
        "--endpoint",
        "127.0.0.1:1",
        "--listen",
        "127.0.0.1:0",
        "--http",
        "127.0.0.1:0",
        "--blocks",
        blocks.to_str().unwrap(),
        "--domain",
        "s3.localhost",
        "--reclaim",
        "false",
        "--om-timeout",
        "1",
    ])
    .unwrap();
    let opts = cfg.client_options().unwrap();
    let om = Arc::new(om_client::OmClient::new(std::slice::from_ref(&cfg.endpoint), opts).unwrap());
    let gw = om_s3::start_with(cfg, om).await.unwrap();
    let addr = gw.addr();

    // Anonymous: refused by s3s before any operation runs.
    let (status, text) = send(
        addr,
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 403, "{text}");
    assert!(text.contains("AccessDenied"), "{text}");

    // Virtual-host style, anonymous: the same refusal.
    let (status, _) = send(
        addr,
        "GET /k HTTP/1.1\r\nHost: photos.s3.localhost:9878\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 403);

    // Signed: the secret is asked of om, which is unreachable.
    let now = chrono::Utc::now();
    let date = now.format("%Y%m%dT%H%M%SZ");
    let day = now.format("%Y%m%d");
    let head = format!(
        "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\
         x-amz-date: {date}\r\nx-amz-content-sha256: UNSIGNED-PAYLOAD\r\n\
         Authorization: AWS4-HMAC-SHA256 Credential=OMABCDEFGHIJ01234567/{day}/us-east-1/s3/aws4_request, \
         SignedHeaders=host;x-amz-content-sha256;x-amz-date, Signature={}\r\n\r\n",
        "0".repeat(64)
    );
    let (status, text) = send(addr, &head).await;
    assert_eq!(status, 503, "{text}");
    assert!(text.contains("ServiceUnavailable"), "{text}");

    // Health.
    let http = gw.http_addr().unwrap();
    let (status, text) = send(
        http,
        "GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let (status, _) = send(
        http,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert_eq!(status, 200);

    gw.stop().await;
    assert!(TcpStream::connect(addr).await.is_err());
}
