//! `omctl bucket lifecycle set|get|delete`: lifecycle rules in the JSON that
//! `aws s3api put-bucket-lifecycle-configuration` takes (and
//! `get-bucket-lifecycle-configuration` prints).
//!
//! The JSON is read strictly: an unknown field is an error, a filter names
//! exactly one predicate, and actions om does not run (`Transitions`,
//! `NoncurrentVersionTransitions`) travel to the server by name, which
//! refuses the rule; nothing is silently dropped. What S3 decides about a
//! rule the server decides too: a rule without `ID` travels without one
//! (the server assigns it), one without `Filter` or `Prefix` travels without
//! a filter (the server refuses it).

use anyhow::{Context, Result, bail};
use om_client::OmClient;
use om_client::v1::lifecycle_filter::Predicate;
use om_client::v1::*;
use serde_json::{Map, Value, json};

use crate::{Output, split2};

#[derive(clap::Subcommand)]
pub enum Cmd {
    /// Replace VOLUME/BUCKET's rules with those of FILE (AWS JSON; `-` reads stdin).
    Set { path: String, file: String },
    /// Print VOLUME/BUCKET's rules as AWS JSON.
    Get { path: String },
    /// Remove VOLUME/BUCKET's rules.
    Delete { path: String },
    /// Where VOLUME/BUCKET's lifecycle scan stands: the pass under way (phase,
    /// cursor, entries evaluated, actions by action and by rule) and the last
    /// completed one.
    Status {
        path: String,
        /// Redraw a progress line every second until the pass under way
        /// completes (or, when idle, the next one does).
        #[arg(long)]
        watch: bool,
    },
}

/// Actions S3 has that om does not run.
const UNSUPPORTED: [&str; 2] = ["Transitions", "NoncurrentVersionTransitions"];

fn object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object()
        .with_context(|| format!("{what} must be a JSON object"))
}

fn only(m: &Map<String, Value>, what: &str, allowed: &[&str]) -> Result<()> {
    for k in m.keys() {
        if !allowed.contains(&k.as_str()) {
            bail!("{what}: unknown field {k:?} (expected one of {allowed:?})");
        }
    }
    Ok(())
}

fn string(v: &Value, what: &str) -> Result<String> {
    v.as_str()
        .map(str::to_string)
        .with_context(|| format!("{what} must be a string"))
}

fn number(v: &Value, what: &str) -> Result<u64> {
    v.as_u64()
        .with_context(|| format!("{what} must be a non-negative integer"))
}

fn days(v: &Value, what: &str) -> Result<u32> {
    u32::try_from(number(v, what)?).with_context(|| format!("{what} is too large"))
}

fn tag(v: &Value, what: &str) -> Result<LifecycleTag> {
    let m = object(v, what)?;
    only(m, what, &["Key", "Value"])?;
    Ok(LifecycleTag {
        key: string(m.get("Key").unwrap_or(&Value::Null), &format!("{what}.Key"))?,
        value: m
            .get("Value")
            .map(|v| string(v, &format!("{what}.Value")))
            .transpose()?
            .unwrap_or_default(),
    })
}

/// An ISO 8601 date or timestamp (S3 wants midnight UTC; the server checks).
fn date_ms(s: &str, what: &str) -> Result<u64> {
    let t = match chrono::DateTime::parse_from_rfc3339(s) {
        Ok(t) => t.with_timezone(&chrono::Utc),
        Err(_) => chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d")
            .with_context(|| format!("{what}: {s:?} is not an ISO 8601 date"))?
            .and_hms_opt(0, 0, 0)
            .context("midnight")?
            .and_utc(),
    };
    u64::try_from(t.timestamp_millis()).with_context(|| format!("{what}: {s:?} is before 1970"))
}

fn filter(v: &Value, what: &str) -> Result<LifecycleFilter> {
    let m = object(v, what)?;
    only(
        m,
        what,
        &[
            "Prefix",
            "Tag",
            "ObjectSizeGreaterThan",
            "ObjectSizeLessThan",
            "And",
        ],
    )?;
    if m.len() > 1 {
        bail!(
            "{what} names {} predicates; use And to combine them",
            m.len()
        );
    }
    let predicate = match m.iter().next() {
        None => None,
        Some((k, v)) => Some(match k.as_str() {
            "Prefix" => Predicate::Prefix(string(v, &format!("{what}.Prefix"))?),
            "Tag" => Predicate::Tag(tag(v, &format!("{what}.Tag"))?),
            "ObjectSizeGreaterThan" => {
                Predicate::ObjectSizeGreaterThan(number(v, &format!("{what}.{k}"))?)
            }
            "ObjectSizeLessThan" => {
                Predicate::ObjectSizeLessThan(number(v, &format!("{what}.{k}"))?)
            }
            _ => {
                let w = format!("{what}.And");
                let a = object(v, &w)?;
                only(
                    a,
                    &w,
                    &[
                        "Prefix",
                        "Tags",
                        "ObjectSizeGreaterThan",
                        "ObjectSizeLessThan",
                    ],
                )?;
                Predicate::And(LifecycleAnd {
                    prefix: a
                        .get("Prefix")
                        .map(|p| string(p, &format!("{w}.Prefix")))
                        .transpose()?
                        .unwrap_or_default(),
                    tags: match a.get("Tags") {
                        None => Vec::new(),
                        Some(t) => t
                            .as_array()
                            .with_context(|| format!("{w}.Tags must be a list"))?
                            .iter()
                            .enumerate()
                            .map(|(i, t)| tag(t, &format!("{w}.Tags[{i}]")))
                            .collect::<Result<_>>()?,
                    },
                    object_size_greater_than: a
                        .get("ObjectSizeGreaterThan")
                        .map(|n| number(n, &format!("{w}.ObjectSizeGreaterThan")))
                        .transpose()?,
                    object_size_less_than: a
                        .get("ObjectSizeLessThan")
                        .map(|n| number(n, &format!("{w}.ObjectSizeLessThan")))
                        .transpose()?,
                })
            }
        }),
    };
    Ok(LifecycleFilter { predicate })
}

fn rule(v: &Value, i: usize) -> Result<LifecycleRule> {
    let what = format!("Rules[{i}]");
    let m = object(v, &what)?;
    let mut allowed = vec![
        "ID",
        "Status",
        "Filter",
        "Prefix",
        "Expiration",
        "NoncurrentVersionExpiration",
        "AbortIncompleteMultipartUpload",
    ];
    allowed.extend(UNSUPPORTED);
    only(m, &what, &allowed)?;
    let enabled = match m.get("Status").and_then(Value::as_str) {
        Some("Enabled") => true,
        Some("Disabled") => false,
        _ => bail!("{what}.Status must be \"Enabled\" or \"Disabled\""),
    };
    let filter = match (m.get("Filter"), m.get("Prefix")) {
        (Some(_), Some(_)) => bail!("{what}: give Filter or the older Prefix, not both"),
        (Some(f), None) => Some(filter(f, &format!("{what}.Filter"))?),
        (None, Some(p)) => Some(LifecycleFilter {
            predicate: Some(Predicate::Prefix(string(p, &format!("{what}.Prefix"))?)),
        }),
        (None, None) => None,
    };
    let expiration = match m.get("Expiration") {
        None => None,
        Some(e) => {
            let w = format!("{what}.Expiration");
            let e = object(e, &w)?;
            only(e, &w, &["Days", "Date", "ExpiredObjectDeleteMarker"])?;
            Some(LifecycleExpiration {
                days: e
                    .get("Days")
                    .map(|d| days(d, &format!("{w}.Days")))
                    .transpose()?,
                date_ms: e
                    .get("Date")
                    .map(|d| date_ms(&string(d, &format!("{w}.Date"))?, &format!("{w}.Date")))
                    .transpose()?,
                expired_object_delete_marker: e
                    .get("ExpiredObjectDeleteMarker")
                    .map(|b| {
                        b.as_bool().with_context(|| {
                            format!("{w}.ExpiredObjectDeleteMarker must be true or false")
                        })
                    })
                    .transpose()?,
            })
        }
    };
    let noncurrent_version_expiration = match m.get("NoncurrentVersionExpiration") {
        None => None,
        Some(n) => {
            let w = format!("{what}.NoncurrentVersionExpiration");
            let n = object(n, &w)?;
            only(n, &w, &["NoncurrentDays", "NewerNoncurrentVersions"])?;
            Some(LifecycleNoncurrentExpiration {
                noncurrent_days: days(
                    n.get("NoncurrentDays").unwrap_or(&Value::Null),
                    &format!("{w}.NoncurrentDays"),
                )?,
                newer_noncurrent_versions: n
                    .get("NewerNoncurrentVersions")
                    .map(|d| days(d, &format!("{w}.NewerNoncurrentVersions")))
                    .transpose()?
                    .unwrap_or(0),
            })
        }
    };
    let abort_incomplete_multipart_upload = match m.get("AbortIncompleteMultipartUpload") {
        None => None,
        Some(a) => {
            let w = format!("{what}.AbortIncompleteMultipartUpload");
            let a = object(a, &w)?;
            only(a, &w, &["DaysAfterInitiation"])?;
            Some(LifecycleAbortUpload {
                days_after_initiation: days(
                    a.get("DaysAfterInitiation").unwrap_or(&Value::Null),
                    &format!("{w}.DaysAfterInitiation"),
                )?,
            })
        }
    };
    Ok(LifecycleRule {
        id: m
            .get("ID")
            .map(|v| string(v, &format!("{what}.ID")))
            .transpose()?
            .unwrap_or_default(),
        enabled,
        filter,
        expiration,
        noncurrent_version_expiration,
        abort_incomplete_multipart_upload,
        legacy_prefix: m.contains_key("Prefix"),
        unsupported: UNSUPPORTED
            .iter()
            .filter(|k| m.contains_key(**k))
            .map(|k| k.to_string())
            .collect(),
    })
}

/// Rules from AWS's JSON (`{"Rules": [...]}`).
pub fn parse(v: &Value) -> Result<Vec<LifecycleRule>> {
    let m = object(v, "the configuration")?;
    only(m, "the configuration", &["Rules"])?;
    m.get("Rules")
        .and_then(Value::as_array)
        .context("the configuration needs a Rules list")?
        .iter()
        .enumerate()
        .map(|(i, r)| rule(r, i))
        .collect()
}

fn tag_json(t: &LifecycleTag) -> Value {
    json!({"Key": t.key, "Value": t.value})
}

fn iso_date(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_else(|| ms.to_string())
}

/// Rules as AWS's JSON.
pub fn to_json(rules: &[LifecycleRule]) -> Value {
    let rules: Vec<Value> = rules
        .iter()
        .map(|r| {
            let mut m = Map::new();
            m.insert("ID".into(), json!(r.id));
            m.insert(
                "Status".into(),
                json!(if r.enabled { "Enabled" } else { "Disabled" }),
            );
            let f = match r.filter.as_ref().and_then(|f| f.predicate.as_ref()) {
                None => json!({}),
                Some(Predicate::Prefix(p)) => json!({"Prefix": p}),
                Some(Predicate::Tag(t)) => json!({"Tag": tag_json(t)}),
                Some(Predicate::ObjectSizeGreaterThan(n)) => json!({"ObjectSizeGreaterThan": n}),
                Some(Predicate::ObjectSizeLessThan(n)) => json!({"ObjectSizeLessThan": n}),
                Some(Predicate::And(a)) => {
                    let mut and = Map::new();
                    if !a.prefix.is_empty() {
                        and.insert("Prefix".into(), json!(a.prefix));
                    }
                    if !a.tags.is_empty() {
                        and.insert("Tags".into(), a.tags.iter().map(tag_json).collect());
                    }
                    if let Some(n) = a.object_size_greater_than {
                        and.insert("ObjectSizeGreaterThan".into(), json!(n));
                    }
                    if let Some(n) = a.object_size_less_than {
                        and.insert("ObjectSizeLessThan".into(), json!(n));
                    }
                    json!({"And": and})
                }
            };
            // A rule given with the older top-level Prefix is shown so.
            match (&f, r.legacy_prefix) {
                (Value::Object(o), true) if o.len() <= 1 => {
                    let p = o.get("Prefix").cloned().unwrap_or_else(|| json!(""));
                    m.insert("Prefix".into(), p)
                }
                _ => m.insert("Filter".into(), f),
            };
            if let Some(e) = &r.expiration {
                let mut x = Map::new();
                if let Some(d) = e.days {
                    x.insert("Days".into(), json!(d));
                }
                if let Some(d) = e.date_ms {
                    x.insert("Date".into(), json!(iso_date(d)));
                }
                if let Some(m) = e.expired_object_delete_marker {
                    x.insert("ExpiredObjectDeleteMarker".into(), json!(m));
                }
                m.insert("Expiration".into(), Value::Object(x));
            }
            if let Some(n) = &r.noncurrent_version_expiration {
                let mut x = Map::new();
                x.insert("NoncurrentDays".into(), json!(n.noncurrent_days));
                if n.newer_noncurrent_versions > 0 {
                    x.insert(
                        "NewerNoncurrentVersions".into(),
                        json!(n.newer_noncurrent_versions),
                    );
                }
                m.insert("NoncurrentVersionExpiration".into(), Value::Object(x));
            }
            if let Some(a) = &r.abort_incomplete_multipart_upload {
                m.insert(
                    "AbortIncompleteMultipartUpload".into(),
                    json!({"DaysAfterInitiation": a.days_after_initiation}),
                );
            }
            Value::Object(m)
        })
        .collect();
    json!({ "Rules": rules })
}

fn counts(m: &std::collections::BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, n)| format!("{k}={n}"))
        .collect::<Vec<_>>()
        .join(" ")
}

fn status_json(path: &str, r: &GetLifecycleStatusResponse) -> Value {
    let Some(s) = &r.status else {
        return json!({"bucket": path, "rules": r.rules.len(), "pass": 0, "phase": "not started"});
    };
    json!({
        "bucket": path,
        "rules": r.rules.len(),
        "pass": s.pass,
        "phase": s.phase,
        "cursor": s.cursor,
        "cursor_version_id": s.cursor_version_id,
        "pass_started": iso_date(s.pass_started_ms),
        "cursor_moved": iso_date(s.cursor_ms),
        "evaluated": s.evaluated,
        "actions": s.actions,
        "rule_actions": s.rule_actions,
        "last_pass_started": (s.last_pass_completed_ms > 0).then(|| iso_date(s.last_pass_started_ms)),
        "last_pass_completed": (s.last_pass_completed_ms > 0).then(|| iso_date(s.last_pass_completed_ms)),
        "last_pass_evaluated": s.last_pass_evaluated,
        "last_pass_actions": s.last_pass_actions,
        "total_evaluated": s.total_evaluated,
        "total_actions": s.total_actions,
        "last_resume_seeks": s.last_resume_seeks,
        "last_resume_before_cursor": s.last_resume_before_cursor,
        "current_configuration": s.current,
        "bucket_key_count": s.bucket_key_count,
    })
}

fn print_status(path: &str, r: &GetLifecycleStatusResponse) {
    let Some(s) = &r.status else {
        println!(
            "{path}: {} lifecycle rules; no scan has started",
            r.rules.len()
        );
        return;
    };
    println!("{path}: {} lifecycle rules, pass {}", r.rules.len(), s.pass);
    if s.phase == "idle" {
        println!("  idle (next pass after the interval)");
    } else {
        let version = if s.cursor_version_id.is_empty() {
            String::new()
        } else {
            format!(" version {}", s.cursor_version_id)
        };
        println!(
            "  phase {}, cursor {:?}{version}, moved {}",
            s.phase,
            s.cursor,
            iso_date(s.cursor_ms)
        );
        println!(
            "  this pass: started {}, evaluated {} (bucket holds {}), actions: {}",
            iso_date(s.pass_started_ms),
            s.evaluated,
            s.bucket_key_count,
            counts(&s.actions)
        );
        println!("  by rule: {}", counts(&s.rule_actions));
    }
    if s.last_pass_completed_ms > 0 {
        println!(
            "  last pass: {} to {} ({:.1} s), evaluated {}, actions: {}",
            iso_date(s.last_pass_started_ms),
            iso_date(s.last_pass_completed_ms),
            s.last_pass_completed_ms
                .saturating_sub(s.last_pass_started_ms) as f64
                / 1000.0,
            s.last_pass_evaluated,
            counts(&s.last_pass_actions)
        );
    }
    println!(
        "  all passes: evaluated {}, actions: {}",
        s.total_evaluated,
        counts(&s.total_actions)
    );
    println!(
        "  last page resumed with {} seek(s), {} entries at or before its cursor{}",
        s.last_resume_seeks,
        s.last_resume_before_cursor,
        if s.current {
            ""
        } else {
            "; the configuration changed: the next page starts a new pass"
        }
    );
}

/// One progress line: a bar of entries evaluated against the bucket's size.
fn progress_line(s: &LifecycleStatus) -> String {
    let total = s.bucket_key_count.max(1);
    let done = if s.phase == "idle" {
        total
    } else {
        s.evaluated.min(total)
    };
    let width = 30;
    let filled = (done as usize * width) / total as usize;
    let actions: u64 = s.actions.values().sum();
    format!(
        "pass {} [{}{}] {:>3}% {} evaluated, {actions} actions, phase {}",
        s.pass,
        "#".repeat(filled),
        ".".repeat(width - filled),
        done * 100 / total,
        s.evaluated,
        s.phase
    )
}

async fn status(c: &OmClient, out: Output, path: &str, watch: bool) -> Result<()> {
    let (v, b) = split2(path)?;
    let req = GetLifecycleStatusRequest {
        volume: v.into(),
        bucket: b.into(),
        ..Default::default()
    };
    let r = c.get_lifecycle_status(req.clone()).await?;
    if !watch {
        if out == Output::Json {
            println!("{}", status_json(path, &r));
        } else {
            print_status(path, &r);
        }
        return Ok(());
    }
    // The pass to watch: the one under way, else the next.
    let start = r.status.as_ref().map_or(0, |s| s.pass);
    let watched = match &r.status {
        Some(s) if s.phase != "idle" => start,
        _ => start + 1,
    };
    loop {
        let r = c.get_lifecycle_status(req.clone()).await?;
        if let Some(s) = &r.status {
            let finished = s.pass > watched || (s.pass == watched && s.phase == "idle");
            if out == Output::Json {
                println!("{}", status_json(path, &r));
            } else if s.pass >= watched {
                use std::io::Write;
                print!("\r{}", progress_line(s));
                std::io::stdout().flush()?;
            }
            if finished {
                if out != Output::Json {
                    println!();
                    print_status(path, &r);
                }
                return Ok(());
            }
        }
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

pub async fn run(c: &OmClient, out: Output, cmd: Cmd) -> Result<()> {
    match cmd {
        Cmd::Status { path, watch } => status(c, out, &path, watch).await?,
        Cmd::Set { path, file } => {
            let (v, b) = split2(&path)?;
            let text = if file == "-" {
                std::io::read_to_string(std::io::stdin())?
            } else {
                std::fs::read_to_string(&file).with_context(|| format!("reading {file}"))?
            };
            let json: Value =
                serde_json::from_str(&text).with_context(|| format!("{file} is not JSON"))?;
            let rules = parse(&json)?;
            let n = rules.len();
            c.put_bucket_lifecycle(PutBucketLifecycleRequest {
                volume: v.into(),
                bucket: b.into(),
                rules,
                ..Default::default()
            })
            .await?;
            if out == Output::Json {
                println!("{}", json!({"bucket": path, "rules": n}));
            } else {
                println!("set {n} lifecycle rules on {path}");
            }
        }
        Cmd::Get { path } => {
            let (v, b) = split2(&path)?;
            let r = c
                .get_bucket_lifecycle(GetBucketLifecycleRequest {
                    volume: v.into(),
                    bucket: b.into(),
                    ..Default::default()
                })
                .await?;
            println!("{}", serde_json::to_string_pretty(&to_json(&r.rules))?);
        }
        Cmd::Delete { path } => {
            let (v, b) = split2(&path)?;
            c.delete_bucket_lifecycle(DeleteBucketLifecycleRequest {
                volume: v.into(),
                bucket: b.into(),
                ..Default::default()
            })
            .await?;
            if out == Output::Json {
                println!("{}", json!({"bucket": path, "lifecycle": "deleted"}));
            } else {
                println!("deleted the lifecycle rules of {path}");
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aws_json_round_trips() {
        let src = json!({"Rules": [
            {"ID": "logs", "Status": "Enabled", "Filter": {"Prefix": "logs/"},
             "Expiration": {"Days": 30},
             "NoncurrentVersionExpiration": {"NoncurrentDays": 10, "NewerNoncurrentVersions": 3},
             "AbortIncompleteMultipartUpload": {"DaysAfterInitiation": 7}},
            {"ID": "tmp", "Status": "Disabled",
             "Filter": {"And": {"Prefix": "tmp/", "Tags": [{"Key": "k", "Value": "v"}],
                                "ObjectSizeGreaterThan": 100}},
             "Expiration": {"Date": "2027-01-01T00:00:00Z"}},
            {"ID": "markers", "Status": "Enabled", "Filter": {},
             "Expiration": {"ExpiredObjectDeleteMarker": true}},
        ]});
        let rules = parse(&src).unwrap();
        assert_eq!(
            rules[1].expiration.as_ref().unwrap().date_ms,
            Some(1_798_761_600_000)
        );
        assert_eq!(to_json(&rules), src);
        // The older rule-level Prefix becomes a filter, remembered as given
        // and printed back in its form.
        let src = json!({"Rules": [{"ID": "a", "Status": "Enabled", "Prefix": "x/",
            "Expiration": {"Days": 1}}]});
        let old = parse(&src).unwrap();
        assert_eq!(
            old[0].filter.as_ref().unwrap().predicate,
            Some(Predicate::Prefix("x/".into()))
        );
        assert!(old[0].legacy_prefix);
        assert_eq!(to_json(&old), src);
    }

    /// What S3 decides about a rule reaches the server as given: no `ID`
    /// (the server assigns one), `ExpiredObjectDeleteMarker: false` (kept,
    /// and printed back), no `Filter` nor `Prefix` (the server refuses it).
    #[test]
    fn what_s3_decides_travels_to_the_server() {
        let src = json!({"Rules": [{"Status": "Enabled", "Filter": {},
            "Expiration": {"ExpiredObjectDeleteMarker": false}}]});
        let rules = parse(&src).unwrap();
        assert_eq!(rules[0].id, "");
        assert_eq!(
            rules[0]
                .expiration
                .as_ref()
                .unwrap()
                .expired_object_delete_marker,
            Some(false)
        );
        assert_eq!(
            to_json(&rules)["Rules"][0]["Expiration"],
            json!({"ExpiredObjectDeleteMarker": false})
        );
        let bare = parse(&json!({"Rules": [{"ID": "a", "Status": "Enabled",
            "Expiration": {"Days": 1}}]}))
        .unwrap();
        assert!(bare[0].filter.is_none());
    }

    #[test]
    fn bad_json_is_refused_loudly() {
        let bad = |v: Value| parse(&v).unwrap_err().to_string();
        assert!(bad(json!({"Rules": [{"ID": "a", "Status": "On"}]})).contains("Status"));
        assert!(
            bad(json!({"Rules": [{"ID": "a", "Status": "Enabled",
                "Filter": {"Prefix": "a", "ObjectSizeLessThan": 5}}]}))
            .contains("predicates")
        );
        assert!(
            bad(json!({"Rules": [{"ID": "a", "Status": "Enabled", "Expirations": {}}]}))
                .contains("unknown field")
        );
        // Transitions reach the server by name, which refuses the rule.
        let t = parse(&json!({"Rules": [{"ID": "a", "Status": "Enabled",
            "Transitions": [{"Days": 1, "StorageClass": "GLACIER"}]}]}))
        .unwrap();
        assert_eq!(t[0].unsupported, ["Transitions"]);
    }
}
