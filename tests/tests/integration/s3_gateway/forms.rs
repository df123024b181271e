//! POST form uploads signed with SigV4 stream as PUTs do: a 256 MiB form,
//! against a POST memory budget of 1 MiB, is stored whole while the
//! gateway's memory stays put, its fields becoming the object's headers and
//! `${filename}` its file's name. Its policy is held before the file is
//! read: a key outside it, a field it does not name, a file past its
//! length range, an expired policy and a wrong signature are each refused
//! with S3's error and store nothing; so is a form with a part after its
//! file. Forms are answered 204, 201 with a `PostResponse`, or 303 to
//! `success_action_redirect`, as S3 answers them. SigV2 forms (with
//! `--allow-sigv2`) are checked and streamed the same way.

use base64::Engine;
use hmac::{Hmac, KeyInit, Mac};
use serde_json::{Value, json};
use sha2::Sha256;

use super::refusals::{FORM_END, peak_growth, post_form};
use super::*;

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    let mut m = <Hmac<Sha256>>::new_from_slice(key).unwrap();
    m.update(data);
    m.finalize().into_bytes().to_vec()
}

/// The fields of a form for `key`, with `extra` fields, signed by
/// `access`/`secret` under a policy of `conditions` (and the credential's
/// own) that expires `expires_in` from now.
fn signed_form(
    access: &str,
    secret: &str,
    key: &str,
    mut conditions: Vec<Value>,
    extra: &[(&str, &str)],
    expires_in: chrono::Duration,
) -> Vec<(String, String)> {
    let now = chrono::Utc::now();
    let date = now.format("%Y%m%d").to_string();
    let amz_date = now.format("%Y%m%dT%H%M%SZ").to_string();
    let credential = format!("{access}/{date}/us-east-1/s3/aws4_request");
    conditions.push(json!({"x-amz-algorithm": "AWS4-HMAC-SHA256"}));
    conditions.push(json!({ "x-amz-credential": credential.clone() }));
    conditions.push(json!({ "x-amz-date": amz_date.clone() }));
    let policy = json!({
        "expiration": (now + expires_in).format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "conditions": conditions,
    });
    let policy = base64::engine::general_purpose::STANDARD.encode(policy.to_string());
    let k = hmac(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    let k = hmac(&k, b"us-east-1");
    let k = hmac(&k, b"s3");
    let k = hmac(&k, b"aws4_request");
    let signature = hex::encode(hmac(&k, policy.as_bytes()));
    let mut fields = vec![("key".to_string(), key.to_string())];
    fields.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    fields.extend([
        ("x-amz-algorithm".into(), "AWS4-HMAC-SHA256".into()),
        ("x-amz-credential".into(), credential),
        ("x-amz-date".into(), amz_date),
        ("policy".into(), policy),
        ("x-amz-signature".into(), signature),
    ]);
    fields
}

/// `signed_form` signed with SigV2: `AWSAccessKeyId`, and the policy's
/// HMAC-SHA1 under `secret`, base64.
fn signed_form_v2(
    access: &str,
    secret: &str,
    key: &str,
    conditions: Vec<Value>,
    expires_in: chrono::Duration,
) -> Vec<(String, String)> {
    let policy = json!({
        "expiration": (chrono::Utc::now() + expires_in).format("%Y-%m-%dT%H:%M:%SZ").to_string(),
        "conditions": conditions,
    });
    let policy = base64::engine::general_purpose::STANDARD.encode(policy.to_string());
    let mut m = <Hmac<sha1::Sha1>>::new_from_slice(secret.as_bytes()).unwrap();
    m.update(policy.as_bytes());
    let signature = base64::engine::general_purpose::STANDARD.encode(m.finalize().into_bytes());
    vec![
        ("key".to_string(), key.to_string()),
        ("AWSAccessKeyId".into(), access.to_string()),
        ("policy".into(), policy),
        ("signature".into(), signature),
    ]
}

/// Each form (what it is, its fields, the status and S3 code it gets) is
/// refused as said before the 64 MiB file sent with it is read.
async fn assert_refused(url: &str, refused: impl IntoIterator<Item = Refusal>) {
    for (what, form, status, code) in refused {
        let (written, answer) = post(url, &form, 64 << 20, FORM_END).await;
        assert!(
            answer.starts_with(&format!("HTTP/1.1 {status}")) && answer.contains(code),
            "{what}: {answer}"
        );
        assert!(
            written < 64 << 20,
            "{what}: the file was read before the refusal"
        );
    }
}

type Refusal = (
    &'static str,
    Vec<(String, String)>,
    &'static str,
    &'static str,
);

async fn post(url: &str, fields: &[(String, String)], file: usize, tail: &str) -> (usize, String) {
    let f: Vec<(&str, &str)> = fields
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    post_form(url, "forms", &f, file, tail).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn signed_forms_stream_and_keep_to_their_policy() {
    let env = env_opts(|_| {}, &["--post-memory-bytes", "1048576"]).await;
    let (ak, sk) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &ak, &sk);
    c.create_bucket().bucket("forms").send().await.unwrap();
    let pid = env.gateway.id();
    let hour = chrono::Duration::hours(1);
    let conditions = |max: u64| {
        vec![
            json!({"bucket": "forms"}),
            json!(["starts-with", "$key", "up/"]),
            json!(["content-length-range", 0, max]),
            json!(["starts-with", "$content-type", "video/"]),
            json!(["eq", "$x-amz-meta-color", "red"]),
            json!({"success_action_status": "201"}),
        ]
    };
    let extra = [
        ("content-type", "video/mp4"),
        ("x-amz-meta-color", "red"),
        ("success_action_status", "201"),
    ];

    // 256 MiB through a 1 MiB budget, streamed.
    let size = 256usize << 20;
    let form = signed_form(
        &ak,
        &sk,
        "up/${filename}",
        conditions(1 << 30),
        &extra,
        hour,
    );
    let ((written, answer), grew) = peak_growth(pid, post(&env.url, &form, size, FORM_END)).await;
    eprintln!(
        "a 256 MiB signed form: the gateway grew by {} KiB",
        grew >> 10
    );
    assert_eq!(written, size);
    assert!(answer.starts_with("HTTP/1.1 201"), "{answer}");
    assert!(answer.contains("<Bucket>forms</Bucket>"), "{answer}");
    assert!(answer.contains("<Key>up/f</Key>"), "{answer}");
    assert!(
        grew < 48 << 20,
        "the gateway grew by {} MiB while a 256 MiB signed form was stored",
        grew >> 20
    );
    let head = c
        .head_object()
        .bucket("forms")
        .key("up/f")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(size as i64));
    assert_eq!(head.content_type(), Some("video/mp4"));
    assert_eq!(
        head.metadata()
            .and_then(|m| m.get("color"))
            .map(String::as_str),
        Some("red")
    );
    let mut md5 = md5::Md5::new();
    let mib = vec![b'x'; 1 << 20];
    for _ in 0..256 {
        md5.update(&mib);
    }
    let etag = format!("\"{}\"", hex::encode(md5.finalize()));
    assert_eq!(head.e_tag(), Some(etag.as_str()));
    assert!(
        answer.contains(&format!("<ETag>{}</ETag>", etag.replace('"', "&quot;"))),
        "{answer}"
    );

    // Refused before the file, each with S3's error; nothing stored.
    let bad_key = signed_form(&ak, &sk, "admin/x", conditions(1 << 30), &extra, hour);
    let mut unnamed = extra.to_vec();
    unnamed.push(("x-amz-meta-size", "1"));
    let mut forged = signed_form(&ak, &sk, "up/forged", conditions(1 << 30), &extra, hour);
    forged.last_mut().unwrap().1 = "0".repeat(64);
    let refused = [
        ("a key outside the policy", bad_key, "403", "AccessDenied"),
        (
            "a field the policy does not name",
            signed_form(&ak, &sk, "up/u", conditions(1 << 30), &unnamed, hour),
            "403",
            "AccessDenied",
        ),
        (
            "a file past the length range",
            signed_form(&ak, &sk, "up/big", conditions(1024), &extra, hour),
            "400",
            "EntityTooLarge",
        ),
        (
            "an expired policy",
            signed_form(&ak, &sk, "up/old", conditions(1 << 30), &extra, -hour),
            "403",
            "AccessDenied",
        ),
        ("a wrong signature", forged, "403", "SignatureDoesNotMatch"),
        (
            "a secret that is not the key's",
            signed_form(
                &ak,
                "not-the-secret",
                "up/x",
                conditions(1 << 30),
                &extra,
                hour,
            ),
            "403",
            "SignatureDoesNotMatch",
        ),
    ];
    assert_refused(&env.url, refused).await;
    // A part after the file: found as the file streams, and nothing stored.
    let form = signed_form(&ak, &sk, "up/after", conditions(1 << 30), &extra, hour);
    let tail = "\r\n--B0und\r\nContent-Disposition: form-data; name=\"x-ignore-later\"\r\n\r\nv\
                \r\n--B0und--\r\n";
    let (_, answer) = post(&env.url, &form, 1 << 20, tail).await;
    assert!(
        answer.starts_with("HTTP/1.1 400") && answer.contains("MalformedPOSTRequest"),
        "{answer}"
    );

    // Answered 204 by default, and 303 to a redirect naming the object.
    let plain = vec![
        json!(["starts-with", "$key", "up/"]),
        json!(["starts-with", "$success_action_redirect", ""]),
    ];
    let (_, answer) = post(
        &env.url,
        &signed_form(&ak, &sk, "up/plain", plain[..1].to_vec(), &[], hour),
        10,
        FORM_END,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    let (_, answer) = post(
        &env.url,
        &signed_form(
            &ak,
            &sk,
            "up/r",
            plain,
            &[("success_action_redirect", "http://example.com/done?x=1")],
            hour,
        ),
        10,
        FORM_END,
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    let location = answer
        .lines()
        .find_map(|l| l.strip_prefix("location: "))
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(
        location.starts_with("http://example.com/done?x=1&bucket=forms&key=up%2Fr&etag="),
        "{location}"
    );

    let listed = c.list_objects_v2().bucket("forms").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["up/f", "up/plain", "up/r"]);
}

/// A SigV2 form (`--allow-sigv2`) is checked by the gateway and streamed as
/// a SigV4 one is: 64 MiB through a 1 MiB budget is stored whole; a wrong
/// signature, a key outside the policy, and a policy without a signature
/// are refused before the file is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigv2_forms_are_checked_and_streamed_too() {
    let env = env_opts(|_| {}, &["--post-memory-bytes", "1048576", "--allow-sigv2"]).await;
    let (ak, sk) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &ak, &sk);
    c.create_bucket().bucket("forms").send().await.unwrap();
    let hour = chrono::Duration::hours(1);
    let conditions = || {
        vec![
            json!({"bucket": "forms"}),
            json!(["starts-with", "$key", "v2/"]),
        ]
    };
    let size = 64usize << 20;
    let form = signed_form_v2(&ak, &sk, "v2/${filename}", conditions(), hour);
    let ((written, answer), grew) =
        peak_growth(env.gateway.id(), post(&env.url, &form, size, FORM_END)).await;
    assert_eq!(written, size);
    assert!(answer.starts_with("HTTP/1.1 204"), "{answer}");
    assert!(
        grew < 32 << 20,
        "the gateway grew by {} MiB while a 64 MiB SigV2 form was stored",
        grew >> 20
    );
    let head = c
        .head_object()
        .bucket("forms")
        .key("v2/f")
        .send()
        .await
        .unwrap();
    assert_eq!(head.content_length(), Some(size as i64));

    let mut forged = signed_form_v2(&ak, &sk, "v2/forged", conditions(), hour);
    forged.last_mut().unwrap().1 = "AAAA".into();
    let mut unsigned = signed_form_v2(&ak, &sk, "v2/unsigned", conditions(), hour);
    unsigned.pop();
    let refused = [
        ("a wrong signature", forged, "403", "SignatureDoesNotMatch"),
        (
            "a key outside the policy",
            signed_form_v2(&ak, &sk, "admin/x", conditions(), hour),
            "403",
            "AccessDenied",
        ),
        (
            "a policy without a signature",
            unsigned,
            "400",
            "InvalidArgument",
        ),
    ];
    assert_refused(&env.url, refused).await;
    let listed = c.list_objects_v2().bucket("forms").send().await.unwrap();
    let keys: Vec<&str> = listed.contents().iter().filter_map(|o| o.key()).collect();
    assert_eq!(keys, ["v2/f"]);
}
