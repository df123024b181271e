//! Real S3 clients, each in its default configuration apart from the
//! endpoint and the keys, against the gateway over om with authentication
//! on: s3cmd (which signs for region `US`), rclone, restic, the AWS CLI and
//! boto3 (Debian's packages, which `scripts/setup.sh --tests` installs).
//! Each writes small and multipart objects, lists, reads them back byte for
//! byte and deletes; and every one's work is seen under alice's name in
//! om's audit log.

use std::path::Path;
use std::process::{Command, Output};

use super::*;

/// Runs `cmd` (off the runtime's threads: the members serve on them) and
/// returns its stdout; panics with its output unless it succeeds, and when
/// the program is missing.
async fn run(what: &str, mut cmd: Command) -> String {
    let what = what.to_string();
    tokio::task::spawn_blocking(move || {
        let out: Output = cmd.output().unwrap_or_else(|e| {
            panic!("{what}: cannot start it ({e}); `scripts/setup.sh --tests` installs it")
        });
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{what} failed ({}):\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        stdout
    })
    .await
    .unwrap()
}

/// A directory of files to copy: small ones, one in a subdirectory with
/// a space and a `+` in its name, and one of 20 MiB (multipart for every
/// client here).
fn tree(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let files = vec![
        ("a.txt".to_string(), b"alpha\n".to_vec()),
        (
            "sub/b c+d.bin".to_string(),
            (0..=255u8).cycle().take(70_000).collect(),
        ),
        (
            "big.bin".to_string(),
            (0..20u32 << 20)
                .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                .collect(),
        ),
    ];
    for (name, data) in &files {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, data).unwrap();
    }
    files
}

fn same_tree(files: &[(String, Vec<u8>)], dir: &Path, who: &str) {
    for (name, data) in files {
        let got = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{who}: {name}: {e}"));
        assert!(got == *data, "{who}: {name} differs after the round trip");
    }
}

/// The python that has boto3: the one first on PATH, else Debian's.
fn python() -> &'static str {
    let has = |p: &str| {
        Command::new(p)
            .args(["-c", "import boto3"])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    if has("python3") {
        "python3"
    } else {
        "/usr/bin/python3"
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn real_clients_with_their_defaults() {
    let env = env().await;
    let (key, secret) = env.s3_secret(ALICE, "alice").await;
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    let files = tree(&src);
    let host = env.url.strip_prefix("http://").unwrap().to_string();
    let home = work.path().join("home");
    std::fs::create_dir_all(&home).unwrap();
    // Every client's own configuration lives under a HOME of its own, so
    // nothing of the machine's is read.
    let base = |program: &str| {
        let mut c = Command::new(program);
        c.env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", &home)
            .current_dir(work.path());
        c
    };

    // s3cmd: its configuration file with the endpoint and keys only (so
    // it signs for its default region, `US`).
    let cfg = work.path().join("s3cfg");
    std::fs::write(
        &cfg,
        format!(
            "[default]\naccess_key = {key}\nsecret_key = {secret}\nhost_base = {host}\n\
             host_bucket = {host}\nuse_https = False\n"
        ),
    )
    .unwrap();
    let s3cmd = |args: &[&str]| {
        let mut c = base("s3cmd");
        c.arg("-c").arg(&cfg).args(args);
        c
    };
    // A wrong secret signed for `US` is refused as any wrong signature is.
    let wrong = work.path().join("s3cfg-wrong");
    std::fs::write(
        &wrong,
        std::fs::read_to_string(&cfg)
            .unwrap()
            .replace(&secret, "not-the-secret"),
    )
    .unwrap();
    let mut c = base("s3cmd");
    c.arg("-c").arg(&wrong).args(["mb", "s3://never"]);
    let out = tokio::task::spawn_blocking(move || c.output().unwrap())
        .await
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("SignatureDoesNotMatch"),
        "{err}"
    );
    run("s3cmd mb", s3cmd(&["mb", "s3://s3cmd-bucket"])).await;
    let s = src.to_str().unwrap().to_string() + "/";
    run("s3cmd sync", s3cmd(&["sync", &s, "s3://s3cmd-bucket/t/"])).await;
    let listed = run("s3cmd ls", s3cmd(&["ls", "-r", "s3://s3cmd-bucket"])).await;
    assert!(
        listed.contains("s3://s3cmd-bucket/t/sub/b c+d.bin"),
        "{listed}"
    );
    let back = work.path().join("s3cmd-back");
    let b = back.to_str().unwrap().to_string() + "/";
    run("s3cmd get", s3cmd(&["sync", "s3://s3cmd-bucket/t/", &b])).await;
    same_tree(&files, &back, "s3cmd");
    run(
        "s3cmd del",
        s3cmd(&["del", "-r", "--force", "s3://s3cmd-bucket"]),
    )
    .await;
    run("s3cmd rb", s3cmd(&["rb", "s3://s3cmd-bucket"])).await;

    // rclone: a remote from the environment, provider Other.
    let rclone = |args: &[&str]| {
        let mut c = base("rclone");
        c.env("RCLONE_CONFIG_OM_TYPE", "s3")
            .env("RCLONE_CONFIG_OM_PROVIDER", "Other")
            .env("RCLONE_CONFIG_OM_ACCESS_KEY_ID", &key)
            .env("RCLONE_CONFIG_OM_SECRET_ACCESS_KEY", &secret)
            .env("RCLONE_CONFIG_OM_ENDPOINT", &env.url)
            .args(args);
        c
    };
    let s = src.to_str().unwrap();
    run("rclone mkdir", rclone(&["mkdir", "om:rclone-bucket"])).await;
    run("rclone copy", rclone(&["copy", s, "om:rclone-bucket/t"])).await;
    run("rclone check", rclone(&["check", s, "om:rclone-bucket/t"])).await;
    let back = work.path().join("rclone-back");
    run(
        "rclone copy back",
        rclone(&["copy", "om:rclone-bucket/t", back.to_str().unwrap()]),
    )
    .await;
    same_tree(&files, &back, "rclone");
    run("rclone purge", rclone(&["purge", "om:rclone-bucket"])).await;

    // restic: a repository in a bucket, keys in the environment.
    run("s3cmd mb", s3cmd(&["mb", "s3://restic-bucket"])).await;
    let restic = |args: &[&str]| {
        let mut c = base("restic");
        c.env(
            "RESTIC_REPOSITORY",
            format!("s3:{}/restic-bucket/repo", env.url),
        )
        .env("RESTIC_PASSWORD", "a restic password")
        .env("RESTIC_CACHE_DIR", work.path().join("restic-cache"))
        .env("AWS_ACCESS_KEY_ID", &key)
        .env("AWS_SECRET_ACCESS_KEY", &secret)
        .args(args);
        c
    };
    run("restic init", restic(&["init"])).await;
    run("restic backup", restic(&["backup", "--host", "h", "src"])).await;
    std::fs::write(src.join("a.txt"), b"changed\n").unwrap();
    run("restic backup", restic(&["backup", "--host", "h", "src"])).await;
    std::fs::write(src.join("a.txt"), b"alpha\n").unwrap();
    run("restic check", restic(&["check", "--read-data"])).await;
    run(
        "restic forget",
        restic(&["forget", "--keep-last", "1", "--prune"]),
    )
    .await;
    let back = work.path().join("restic-back");
    run(
        "restic restore",
        restic(&["restore", "latest", "--target", back.to_str().unwrap()]),
    )
    .await;
    // The latest snapshot holds the changed file.
    let mut changed = files.clone();
    changed[0].1 = b"changed\n".to_vec();
    same_tree(&changed, &back.join("src"), "restic");

    // The AWS CLI: keys in the environment, the endpoint on the command line.
    let aws = |args: &[&str]| {
        let mut c = base("aws");
        c.env("AWS_ACCESS_KEY_ID", &key)
            .env("AWS_SECRET_ACCESS_KEY", &secret)
            .env("AWS_DEFAULT_REGION", "us-east-1")
            .args(["--endpoint-url", &env.url])
            .args(args);
        c
    };
    run("aws s3 mb", aws(&["s3", "mb", "s3://aws-bucket"])).await;
    run("aws s3 sync", aws(&["s3", "sync", s, "s3://aws-bucket/t"])).await;
    let head = run(
        "aws s3api head-object",
        aws(&[
            "s3api",
            "head-object",
            "--bucket",
            "aws-bucket",
            "--key",
            "t/big.bin",
        ]),
    )
    .await;
    assert!(head.contains("\"ContentLength\": 20971520"), "{head}");
    let back = work.path().join("aws-back");
    run(
        "aws s3 sync back",
        aws(&["s3", "sync", "s3://aws-bucket/t", back.to_str().unwrap()]),
    )
    .await;
    same_tree(&files, &back, "aws");
    run(
        "aws s3 rb",
        aws(&["s3", "rb", "--force", "s3://aws-bucket"]),
    )
    .await;

    // boto3: a client with the endpoint and keys, and its transfer
    // manager's defaults (multipart above 8 MiB); presigned GETs; a form
    // upload (POST); a PUT without a length.
    let script = r#"
import os, sys, urllib.request, urllib.error, boto3
from botocore.config import Config
from botocore.exceptions import ClientError
s3 = boto3.client("s3", endpoint_url=os.environ["EP"],
                  aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"],
                  region_name="us-east-1")
s3.create_bucket(Bucket="boto-bucket")
s3.upload_file("src/big.bin", "boto-bucket", "big.bin")
s3.put_object(Bucket="boto-bucket", Key="sub/b c+d.bin", Body=open("src/sub/b c+d.bin", "rb").read())
keys = [o["Key"] for o in s3.list_objects_v2(Bucket="boto-bucket")["Contents"]]
assert keys == ["big.bin", "sub/b c+d.bin"], keys
s3.download_file("boto-bucket", "big.bin", "boto-big.bin")
assert open("boto-big.bin", "rb").read() == open("src/big.bin", "rb").read()
params = {"Bucket": "boto-bucket", "Key": "sub/b c+d.bin"}
# boto3 presigns with SigV2 by default, which the gateway refuses unless
# --allow-sigv2, saying why; with SigV4 the URL works.
url = s3.generate_presigned_url("get_object", Params=params)
assert "Signature=" in url and "X-Amz-Signature" not in url, url
try:
    urllib.request.urlopen(url)
    sys.exit("a SigV2 presigned URL was served")
except urllib.error.HTTPError as e:
    assert e.code == 403 and b"signature version 2 is turned off" in e.read()
v4 = boto3.client("s3", endpoint_url=os.environ["EP"],
                  aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"],
                  region_name="us-east-1", config=Config(signature_version="s3v4"))
url = v4.generate_presigned_url("get_object", Params=params)
assert urllib.request.urlopen(url).read() == open("src/sub/b c+d.bin", "rb").read()
# A browser's form upload, signed by generate_presigned_post.
post = v4.generate_presigned_post("boto-bucket", "form.bin")
data = open("src/sub/b c+d.bin", "rb").read()
body = b"".join(
    b'--FoRm\r\nContent-Disposition: form-data; name="%s"\r\n\r\n%s\r\n' % (k.encode(), v.encode())
    for k, v in post["fields"].items()
) + b'--FoRm\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n\r\n' + data + b"\r\n--FoRm--\r\n"
req = urllib.request.Request(post["url"], data=body, method="POST",
                             headers={"Content-Type": "multipart/form-data; boundary=FoRm"})
assert urllib.request.urlopen(req).status == 204
assert s3.get_object(Bucket="boto-bucket", Key="form.bin")["Body"].read() == data
keys.append("form.bin")
# A PUT streamed without a length (Transfer-Encoding: chunked, as
# ceph/s3-tests sends it): taken once its signature checks; a wrong one is
# refused before the body is read, and so is an unsigned one.
def chunked(request, **kwargs):
    request.headers.add_header("Transfer-Encoding", "chunked")
def streaming(secret):
    c = boto3.client("s3", endpoint_url=os.environ["EP"],
                     aws_access_key_id=os.environ["AK"], aws_secret_access_key=secret,
                     region_name="us-east-1")
    c.meta.events.register_first("before-sign.*.*", chunked)
    return c
big = os.urandom(3 << 20)
streaming(os.environ["SK"]).put_object(Bucket="boto-bucket", Key="chunked.bin", Body=big)
assert s3.get_object(Bucket="boto-bucket", Key="chunked.bin")["Body"].read() == big
keys.append("chunked.bin")
try:
    streaming("wrong").put_object(Bucket="boto-bucket", Key="nope.bin", Body=big)
    sys.exit("a wrongly signed upload without a length was taken")
except ClientError as e:
    assert e.response["Error"]["Code"] == "SignatureDoesNotMatch", e.response
req = urllib.request.Request(os.environ["EP"] + "/boto-bucket/anon.bin", method="PUT",
                             data=iter([b"x" * 1000]), headers={"Transfer-Encoding": "chunked"})
try:
    urllib.request.urlopen(req)
    sys.exit("an unsigned upload without a length was taken")
except urllib.error.HTTPError as e:
    assert e.code == 411 and b"signed with SigV4" in e.read()
# Metadata that is not ASCII (sent as UTF-8, as botocore sends it) comes
# back RFC 2047-encoded, as S3 documents.
def utf8_meta(params, **kwargs):
    params["headers"]["x-amz-meta-note"] = "Gr\u00fc\u00dfe"
meta = boto3.client("s3", endpoint_url=os.environ["EP"],
                    aws_access_key_id=os.environ["AK"], aws_secret_access_key=os.environ["SK"],
                    region_name="us-east-1")
meta.meta.events.register("before-call.s3.PutObject", utf8_meta)
meta.put_object(Bucket="boto-bucket", Key="meta.bin", Body=b"m")
got = s3.head_object(Bucket="boto-bucket", Key="meta.bin")["Metadata"]["note"]
import email.header
decoded = "".join(p.decode(c or "ascii") if isinstance(p, bytes) else p
                  for p, c in email.header.decode_header(got))
assert got.startswith("=?UTF-8?") and decoded == "Gr\u00fc\u00dfe", got
keys.append("meta.bin")
s3.delete_objects(Bucket="boto-bucket", Delete={"Objects": [{"Key": k} for k in keys]})
s3.delete_bucket(Bucket="boto-bucket")
print("ok")
"#;
    let mut py = base(python());
    py.env("EP", &env.url)
        .env("AK", &key)
        .env("SK", &secret)
        .args(["-c", script]);
    assert_eq!(run("boto3", py).await.trim(), "ok");

    // Each client acted as alice: om's audit log names her, through the
    // gateway, for each of the five buckets they made (a bucket is created
    // under the volume's authority, so the line names the volume).
    let made = |l: &String| {
        l.contains("\"principal\":\"gw\"")
            && l.contains("\"impersonated_user\":\"alice\"")
            && l.contains("\"operation\":\"CreateBucket\"")
            && l.contains("\"result\":\"OK\"")
    };
    wait_for(
        Duration::from_secs(10),
        "five buckets audited as alice's",
        || {
            let n = env.audit_lines().iter().filter(|l| made(l)).count();
            async move { (n == 5).then_some(()) }
        },
    )
    .await;
}
