//! What nobody authenticated can cost the gateway: a POST form upload is
//! refused before its file is read unless it is signed (the gateway's
//! memory stays put while a 256 MiB unsigned form is sent), a form with a
//! made-up signature is refused before its file too, and sockets that
//! never speak neither keep other clients out nor stay open.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use super::*;

/// The resident memory of process `pid`, in bytes.
fn rss(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

/// Sends a POST form of `fields` and a file named `f` of `file_bytes`
/// bytes `x` to `url`'s bucket `bucket`, closed by `tail` (`FORM_END`, as
/// clients close it), writing while the gateway reads and reading its
/// answer meanwhile; returns the bytes written before the gateway stopped
/// reading (or all of them), and the answer's status line and body if one
/// came.
pub(super) async fn post_form(
    url: &str,
    bucket: &str,
    fields: &[(&str, &str)],
    file_bytes: usize,
    tail: &str,
) -> (usize, String) {
    let host = url.strip_prefix("http://").unwrap();
    let mut head = String::new();
    for (k, v) in fields {
        head.push_str(&format!(
            "--B0und\r\nContent-Disposition: form-data; name=\"{k}\"\r\n\r\n{v}\r\n"
        ));
    }
    head.push_str(
        "--B0und\r\nContent-Disposition: form-data; name=\"file\"; filename=\"f\"\r\n\
         Content-Type: application/octet-stream\r\n\r\n",
    );
    let len = head.len() + file_bytes + tail.len();
    let s = TcpStream::connect(host).await.unwrap();
    let (mut r, mut w) = s.into_split();
    let request = format!(
        "POST /{bucket} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\
         Content-Type: multipart/form-data; boundary=B0und\r\nContent-Length: {len}\r\n\r\n{head}"
    );
    let reader = tokio::spawn(async move {
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(60), r.read_to_end(&mut out)).await;
        String::from_utf8_lossy(&out).to_string()
    });
    let mut written = 0;
    if w.write_all(request.as_bytes()).await.is_ok() {
        let chunk = vec![b'x'; 1 << 20];
        while written < file_bytes {
            let n = chunk.len().min(file_bytes - written);
            match tokio::time::timeout(Duration::from_secs(5), w.write_all(&chunk[..n])).await {
                Ok(Ok(())) => written += n,
                // Refused: the gateway closed, or stopped reading.
                _ => break,
            }
        }
        if written == file_bytes {
            let _ = w.write_all(tail.as_bytes()).await;
        }
    }
    // The write half stays open until the answer came: the gateway takes a
    // client that closes it for one that went away.
    let answer = reader.await.unwrap();
    drop(w);
    (written, answer)
}

/// How `post_form`'s forms end.
pub(super) const FORM_END: &str = "\r\n--B0und--\r\n";

/// Runs `f` while sampling the resident memory of process `pid`: its
/// output, and how far the memory grew above where it began.
pub(super) async fn peak_growth<T>(pid: u32, f: impl std::future::Future<Output = T>) -> (T, u64) {
    let before = rss(pid);
    let peak = Arc::new(AtomicU64::new(before));
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, sampling) = (peak.clone(), sampling.clone());
        tokio::spawn(async move {
            while sampling.load(Ordering::Relaxed) {
                peak.fetch_max(rss(pid), Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let out = f.await;
    sampling.store(false, Ordering::Relaxed);
    sampler.await.unwrap();
    (out, peak.load(Ordering::Relaxed).saturating_sub(before))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nothing_unauthenticated_costs_memory_or_slots() {
    // A budget above the form's size, so what refuses it is the missing
    // signature, not its length.
    let env = env_opts(
        |_| {},
        &[
            "--post-memory-bytes",
            "1073741824",
            "--max-connections",
            "64",
        ],
    )
    .await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("forms").send().await.unwrap();
    let pid = env.gateway.id();

    // Unsigned, and then signed with a made-up key: each refused before
    // the file, the gateway's memory sampled throughout.
    let form = 256 << 20;
    for (what, fields, answer) in [
        ("unsigned", vec![("key", "k")], "HTTP/1.1 403"),
        (
            "made-up signature",
            vec![
                ("key", "k"),
                ("x-amz-algorithm", "AWS4-HMAC-SHA256"),
                (
                    "x-amz-credential",
                    "OMNOSUCHKEY000000000/20270101/us-east-1/s3/aws4_request",
                ),
                ("x-amz-date", "20270101T000000Z"),
                (
                    "policy",
                    "eyJleHBpcmF0aW9uIjoiMjA5OS0wMS0wMVQwMDowMDowMFoiLCJjb25kaXRpb25zIjpbXX0=",
                ),
                ("x-amz-signature", "00"),
            ],
            "HTTP/1.1 4",
        ),
    ] {
        let ((written, answer_text), grew) =
            peak_growth(pid, post_form(&env.url, "forms", &fields, form, FORM_END)).await;
        assert!(
            grew < 32 << 20,
            "{what}: the gateway grew by {} MiB while a 256 MiB form was sent",
            grew >> 20
        );
        assert!(
            written < 64 << 20,
            "{what}: the gateway read {} MiB of the file before refusing",
            written >> 20
        );
        if !answer_text.is_empty() {
            assert!(answer_text.starts_with(answer), "{what}: {answer_text}");
        }
    }
    // Nothing was stored.
    let listed = c.list_objects_v2().bucket("forms").send().await.unwrap();
    assert_eq!(listed.key_count(), Some(0));

    // 64 sockets that never speak, from one address, against a cap of 64:
    // another address is served at once, and the silent ones are closed
    // after the proof timeout (5 s).
    let host = env.url.strip_prefix("http://").unwrap().to_string();
    let mut silent = Vec::new();
    for _ in 0..64 {
        if let Ok(s) = TcpStream::connect(&host).await {
            silent.push(s);
        }
    }
    let from = |ip: &str| {
        let s = TcpSocket::new_v4().unwrap();
        s.bind(format!("{ip}:0").parse().unwrap()).unwrap();
        s
    };
    let t = Instant::now();
    let mut other = from("127.0.0.2")
        .connect(host.parse().unwrap())
        .await
        .unwrap();
    other
        .write_all(
            format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut out = String::new();
    tokio::time::timeout(Duration::from_secs(5), other.read_to_string(&mut out))
        .await
        .expect("another address is answered while silent sockets are open")
        .unwrap();
    assert!(out.starts_with("HTTP/1.1 403"), "{out}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    for mut s in silent {
        let mut b = [0u8; 1];
        let r = tokio::time::timeout(Duration::from_secs(10), s.read(&mut b)).await;
        assert!(
            matches!(r, Ok(Ok(0)) | Ok(Err(_))),
            "a silent socket stayed open: {r:?}"
        );
    }
    // And the client that signs is served as before.
    c.head_bucket().bucket("forms").send().await.unwrap();
}
