//! What S3 says about a write beyond its body: conditional writes with `*`
//! or an ETag (PutObject and CompleteMultipartUpload), the standard headers
//! kept with an object, `x-amz-expiration` on a PUT, a lifecycle rule in the
//! older Prefix form returned as given, request ids, and the bounds of a
//! presigned URL's lifetime.

use aws_sdk_s3::operation::RequestId;
use aws_sdk_s3::primitives::DateTime;
use aws_sdk_s3::types::{
    BucketLifecycleConfiguration, ExpirationStatus, LifecycleExpiration, LifecycleRule,
    MetadataDirective,
};

use super::*;

async fn put(
    c: &Client,
    key: &str,
    m: Option<&str>,
    nm: Option<&str>,
) -> Result<String, (String, u16)> {
    let r = c
        .put_object()
        .bucket("hdr")
        .key(key)
        .body(ByteStream::from_static(b"data"))
        .set_if_match(m.map(str::to_string))
        .set_if_none_match(nm.map(str::to_string))
        .send()
        .await;
    match r {
        Ok(o) => Ok(o.e_tag().unwrap().to_string()),
        Err(e) => Err(code::<_, _>(Err::<(), _>(e))),
    }
}

/// A one-part multipart upload completed under the given conditions.
async fn complete(
    c: &Client,
    key: &str,
    m: Option<&str>,
    nm: Option<&str>,
) -> Result<String, (String, u16)> {
    let up = c
        .create_multipart_upload()
        .bucket("hdr")
        .key(key)
        .send()
        .await
        .unwrap();
    let id = up.upload_id().unwrap();
    let part = c
        .upload_part()
        .bucket("hdr")
        .key(key)
        .upload_id(id)
        .part_number(1)
        .body(ByteStream::from_static(b"abc"))
        .send()
        .await
        .unwrap();
    let r = c
        .complete_multipart_upload()
        .bucket("hdr")
        .key(key)
        .upload_id(id)
        .multipart_upload(
            CompletedMultipartUpload::builder()
                .parts(
                    CompletedPart::builder()
                        .part_number(1)
                        .e_tag(part.e_tag().unwrap())
                        .build(),
                )
                .build(),
        )
        .set_if_match(m.map(str::to_string))
        .set_if_none_match(nm.map(str::to_string))
        .send()
        .await;
    let out = match r {
        Ok(o) => Ok(o.e_tag().unwrap().to_string()),
        Err(e) => Err(code::<_, _>(Err::<(), _>(e))),
    };
    if out.is_err() {
        c.abort_multipart_upload()
            .bucket("hdr")
            .key(key)
            .upload_id(id)
            .send()
            .await
            .unwrap();
    }
    out
}

fn failed(code: &str, status: u16) -> Result<String, (String, u16)> {
    Err((code.to_string(), status))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writes_carry_conditions_headers_and_ids() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let c = s3(&env.url, &key, &secret);
    c.create_bucket().bucket("hdr").send().await.unwrap();

    // Conditional writes, as S3 (and ceph/s3-tests) have them: `*` or an
    // ETag on either header; a value that is no ETag never matches.
    for multipart in [false, true] {
        let write = |c: &Client, k: &str, m: Option<&str>, nm: Option<&str>| {
            let (c, k, m, nm) = (
                c.clone(),
                k.to_string(),
                m.map(str::to_string),
                nm.map(str::to_string),
            );
            async move {
                if multipart {
                    complete(&c, &k, m.as_deref(), nm.as_deref()).await
                } else {
                    put(&c, &k, m.as_deref(), nm.as_deref()).await
                }
            }
        };
        let k = "cond";
        let etag = write(&c, k, None, Some("*")).await.unwrap();
        assert_eq!(
            write(&c, k, None, Some("*")).await,
            failed("PreconditionFailed", 412)
        );
        assert_eq!(
            write(&c, k, None, Some(&etag)).await,
            failed("PreconditionFailed", 412)
        );
        let etag = write(&c, k, None, Some("badetag")).await.unwrap();
        let etag = write(&c, k, Some(&etag), None).await.unwrap();
        assert_eq!(
            write(&c, k, Some("badetag"), None).await,
            failed("PreconditionFailed", 412)
        );
        let etag2 = write(&c, k, Some("*"), None).await.unwrap();
        assert_eq!(etag2, etag);
        c.delete_object().bucket("hdr").key(k).send().await.unwrap();
        assert_eq!(
            write(&c, k, Some("*"), None).await,
            failed("NoSuchKey", 404)
        );
        assert_eq!(
            write(&c, k, Some("badetag"), None).await,
            failed("NoSuchKey", 404)
        );
        write(&c, k, None, Some(&etag)).await.unwrap();
        c.delete_object().bucket("hdr").key(k).send().await.unwrap();
    }

    // Standard headers are kept and returned; GET's response-* parameters
    // override them; user metadata stays apart.
    let expires = DateTime::from_secs(1_900_000_000);
    c.put_object()
        .bucket("hdr")
        .key("page.html")
        .body(ByteStream::from_static(b"<p>"))
        .content_type("text/html")
        .cache_control("public, max-age=14400")
        .content_disposition("attachment; filename=\"p.html\"")
        .content_encoding("gzip")
        .content_language("en")
        .expires(expires)
        .metadata("color", "blue")
        .send()
        .await
        .unwrap();
    let h = c
        .head_object()
        .bucket("hdr")
        .key("page.html")
        .send()
        .await
        .unwrap();
    assert_eq!(h.cache_control(), Some("public, max-age=14400"));
    assert_eq!(
        h.content_disposition(),
        Some("attachment; filename=\"p.html\"")
    );
    assert_eq!(h.content_encoding(), Some("gzip"));
    assert_eq!(h.content_language(), Some("en"));
    assert_eq!(h.expires_string(), Some("Sun, 17 Mar 2030 17:46:40 GMT"));
    assert_eq!(
        h.metadata().unwrap(),
        &[("color".to_string(), "blue".to_string())].into()
    );
    let g = c
        .get_object()
        .bucket("hdr")
        .key("page.html")
        .response_cache_control("no-cache")
        .response_content_type("text/plain")
        .send()
        .await
        .unwrap();
    assert_eq!(g.cache_control(), Some("no-cache"));
    assert_eq!(g.content_type(), Some("text/plain"));
    assert_eq!(g.content_language(), Some("en"));
    // A copy keeps them (COPY) or takes the request's (REPLACE).
    c.copy_object()
        .bucket("hdr")
        .key("copy.html")
        .copy_source("hdr/page.html")
        .send()
        .await
        .unwrap();
    let h = c
        .head_object()
        .bucket("hdr")
        .key("copy.html")
        .send()
        .await
        .unwrap();
    assert_eq!(h.cache_control(), Some("public, max-age=14400"));
    c.copy_object()
        .bucket("hdr")
        .key("copy.html")
        .copy_source("hdr/page.html")
        .metadata_directive(MetadataDirective::Replace)
        .cache_control("private")
        .send()
        .await
        .unwrap();
    let h = c
        .head_object()
        .bucket("hdr")
        .key("copy.html")
        .send()
        .await
        .unwrap();
    assert_eq!(
        (h.cache_control(), h.content_language()),
        (Some("private"), None)
    );
    assert!(h.metadata().is_none_or(|m| m.is_empty()));

    // A rule given with the older top-level Prefix comes back so, and a PUT
    // it applies to is answered with x-amz-expiration.
    c.put_bucket_lifecycle_configuration()
        .bucket("hdr")
        .lifecycle_configuration(
            BucketLifecycleConfiguration::builder()
                .rules(
                    #[allow(deprecated)]
                    LifecycleRule::builder()
                        .id("old-style")
                        .prefix("tmp/")
                        .status(ExpirationStatus::Enabled)
                        .expiration(LifecycleExpiration::builder().days(3).build())
                        .build()
                        .unwrap(),
                )
                .build()
                .unwrap(),
        )
        .send()
        .await
        .unwrap();
    let got = c
        .get_bucket_lifecycle_configuration()
        .bucket("hdr")
        .send()
        .await
        .unwrap();
    #[allow(deprecated)]
    let prefix = got.rules()[0].prefix();
    assert_eq!((prefix, got.rules()[0].filter()), (Some("tmp/"), None));
    let r = c
        .put_object()
        .bucket("hdr")
        .key("tmp/x")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    let exp = r.expiration().unwrap();
    assert!(exp.contains("rule-id=\"old-style\""), "{exp}");
    let r = c
        .put_object()
        .bucket("hdr")
        .key("kept")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.expiration(), None);

    // Every answer has a request id; an error names it in its body too.
    let ok = c.head_bucket().bucket("hdr").send().await.unwrap();
    assert_eq!(ok.request_id().map(str::len), Some(16));
    let missing = c.get_object().bucket("hdr").key("nope").send().await;
    let id = match &missing {
        Err(SdkError::ServiceError(e)) => e.err().request_id().unwrap().to_string(),
        other => panic!("{other:?}"),
    };
    let url = c
        .get_object()
        .bucket("hdr")
        .key("nope")
        .presigned(PresigningConfig::expires_in(Duration::from_secs(60)).unwrap())
        .await
        .unwrap()
        .uri()
        .to_string();
    let (status, text) = http_get(&url).await;
    assert_eq!(status, 404, "{text}");
    let header = text
        .lines()
        .find_map(|l| l.strip_prefix("x-amz-request-id: "))
        .unwrap()
        .trim();
    assert!(
        text.contains(&format!("<RequestId>{header}</RequestId>")),
        "{text}"
    );
    assert_ne!(header, id);
    // So does an error s3s answers itself (an unsigned request).
    let (status, text) = http_get(&format!("{}/hdr/nope", env.url)).await;
    assert_eq!(status, 403, "{text}");
    let header = text
        .lines()
        .find_map(|l| l.strip_prefix("x-amz-request-id: "))
        .unwrap()
        .trim();
    assert!(
        text.contains(&format!("<RequestId>{header}</RequestId>")),
        "{text}"
    );

    // A presigned URL lives at most seven days and a positive time.
    for bad in ["609901", "-7"] {
        let forged = url.replace("X-Amz-Expires=60", &format!("X-Amz-Expires={bad}"));
        assert_ne!(forged, url);
        let (status, text) = http_get(&forged).await;
        assert_eq!(status, 403, "{text}");
        assert!(
            text.contains("AccessDenied") && text.contains("X-Amz-Expires"),
            "{text}"
        );
    }
}
