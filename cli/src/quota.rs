//! `omctl volume|bucket setquota|clrquota`: space and namespace quotas.

use anyhow::{Result, bail};
use om_client::OmClient;
use om_client::v1::*;

use crate::{Output, bucket_json, print_kv, split2, volume_json};

/// A byte count: digits with an optional unit (B, KB, MB, GB, TB, PB; powers
/// of 1024, as Ozone's shell reads them), e.g. `10GB`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (n, unit) = t.split_at(digits);
    let n: u64 = n
        .parse()
        .map_err(|_| format!("{s:?} is not a size like 1048576, 512MB or 10GB"))?;
    let shift = match unit.trim().to_ascii_uppercase().as_str() {
        "" | "B" => 0,
        "KB" | "K" => 10,
        "MB" | "M" => 20,
        "GB" | "G" => 30,
        "TB" | "T" => 40,
        "PB" | "P" => 50,
        other => {
            return Err(format!(
                "unknown size unit {other:?} (B, KB, MB, GB, TB, PB)"
            ));
        }
    };
    n.checked_mul(1u64 << shift)
        .ok_or_else(|| format!("{s:?} does not fit in 64 bits"))
}

/// Quotas to set; at least one. 0 clears one, like `clrquota`.
#[derive(clap::Args)]
pub struct SetArgs {
    /// VOLUME (volume setquota) or VOLUME/BUCKET (bucket setquota).
    pub path: String,
    /// Most committed bytes, e.g. 10GB.
    #[arg(long, value_parser = parse_size)]
    pub space_quota: Option<u64>,
    /// Most buckets (of a volume) or keys, files and directories (of a bucket).
    #[arg(long)]
    pub namespace_quota: Option<u64>,
}

/// Quotas to clear; at least one.
#[derive(clap::Args)]
pub struct ClrArgs {
    /// VOLUME (volume clrquota) or VOLUME/BUCKET (bucket clrquota).
    pub path: String,
    #[arg(long)]
    pub space_quota: bool,
    #[arg(long)]
    pub namespace_quota: bool,
}

impl SetArgs {
    fn quotas(&self) -> Result<(Option<u64>, Option<u64>)> {
        if self.space_quota.is_none() && self.namespace_quota.is_none() {
            bail!("pass --space-quota and/or --namespace-quota");
        }
        Ok((self.space_quota, self.namespace_quota))
    }
}

impl ClrArgs {
    fn quotas(&self) -> Result<(Option<u64>, Option<u64>)> {
        if !self.space_quota && !self.namespace_quota {
            bail!("pass --space-quota and/or --namespace-quota");
        }
        Ok((
            self.space_quota.then_some(0),
            self.namespace_quota.then_some(0),
        ))
    }
}

async fn volume(
    c: &OmClient,
    out: Output,
    name: &str,
    q: (Option<u64>, Option<u64>),
) -> Result<()> {
    let r = c
        .set_volume_quota(SetVolumeQuotaRequest {
            name: name.to_string(),
            quota_bytes: q.0,
            quota_namespace: q.1,
            ..Default::default()
        })
        .await?;
    print_kv(out, volume_json(&r.volume.unwrap_or_default()));
    Ok(())
}

async fn bucket(
    c: &OmClient,
    out: Output,
    path: &str,
    q: (Option<u64>, Option<u64>),
) -> Result<()> {
    let (v, b) = split2(path)?;
    let r = c
        .set_bucket_quota(SetBucketQuotaRequest {
            volume: v.to_string(),
            name: b.to_string(),
            quota_bytes: q.0,
            quota_namespace: q.1,
            ..Default::default()
        })
        .await?;
    print_kv(out, bucket_json(&r.bucket.unwrap_or_default()));
    Ok(())
}

pub async fn set_volume(c: &OmClient, out: Output, a: SetArgs) -> Result<()> {
    volume(c, out, &a.path, a.quotas()?).await
}

pub async fn clr_volume(c: &OmClient, out: Output, a: ClrArgs) -> Result<()> {
    volume(c, out, &a.path, a.quotas()?).await
}

pub async fn set_bucket(c: &OmClient, out: Output, a: SetArgs) -> Result<()> {
    bucket(c, out, &a.path, a.quotas()?).await
}

pub async fn clr_bucket(c: &OmClient, out: Output, a: ClrArgs) -> Result<()> {
    bucket(c, out, &a.path, a.quotas()?).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_with_units() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("1048576"), Ok(1 << 20));
        assert_eq!(parse_size("10GB"), Ok(10 << 30));
        assert_eq!(parse_size("5 tb"), Ok(5 << 40));
        assert!(parse_size("10XB").is_err());
        assert!(parse_size("GB").is_err());
        assert!(parse_size("99999999PB").is_err());
    }
}
