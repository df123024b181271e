//! The leader's lifecycle scanner: one task on every node that works only
//! while its node leads. Each round it takes one page of every bucket that
//! has rules (round robin, so a large bucket never starves the others),
//! builds it from the replicated cursor (`scan::page`), and proposes it as
//! one `LifecycleScan` command: the actions and the cursor commit together,
//! so a crash or a new leader resumes exactly where the last committed page
//! stopped. Two rates bound it (entries evaluated and actions per second):
//! after each page it waits as long as the page's share of either allows.

use std::sync::Arc;
use std::time::{Duration, Instant};

use om_proto::store::{
    BucketRecord, Caller, LifecycleRecord, LifecycleScanRecord, command::Op, command_result,
};
use tokio::sync::watch;

use crate::authz::{self, Resource};
use crate::error::OmError;
use crate::lifecycle::scan::{self, PageLimits};
use crate::service::{OmService, WriteId};
use crate::store::iter::DeferredSeekIter;
use crate::store::keys;
use crate::store::table::{self, BucketTable, LifecycleScanTable, LifecycleTable};

/// How the scanner runs (`--lifecycle-*` settings).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    /// Length of a lifecycle day (S3's: 86,400,000 ms); shorter only to
    /// age objects quickly in tests, as Ceph's `rgw_lc_debug_interval`.
    pub day_ms: u64,
    /// Entries evaluated per second at most.
    pub evaluations_per_s: u64,
    /// Actions (expirations, removals, aborts) per second at most.
    pub actions_per_s: u64,
    /// A bucket's next pass starts this long after its last one completed.
    pub interval: Duration,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            day_ms: 86_400_000,
            evaluations_per_s: 20_000,
            actions_per_s: 2_000,
            interval: Duration::from_secs(3600),
        }
    }
}

impl Settings {
    fn limits(&self) -> PageLimits {
        PageLimits {
            evaluations: (self.evaluations_per_s as usize).clamp(1, 1000),
            items: (self.actions_per_s as usize).clamp(1, scan::MAX_PAGE_ITEMS),
            day_ms: self.day_ms.clamp(scan::MIN_DAY_MS, scan::MAX_DAY_MS),
            interval_ms: self.interval.as_millis() as u64,
        }
    }

    /// How long a page of `evaluated` entries and `actions` actions must
    /// take at least.
    fn page_time(&self, evaluated: u64, actions: u64) -> Duration {
        let per = |n: u64, rate: u64| Duration::from_secs_f64(n as f64 / rate.max(1) as f64);
        per(evaluated, self.evaluations_per_s).max(per(actions, self.actions_per_s))
    }
}

/// Every bucket with a lifecycle configuration, with its
/// stored scan.
type Configured = (BucketRecord, LifecycleRecord, Option<LifecycleScanRecord>);

fn configured(svc: &OmService) -> Result<Vec<Configured>, OmError> {
    let db = svc.db();
    let mut it = DeferredSeekIter::new(db, keys::LIFECYCLE_CF, None, None)?;
    let mut out = Vec::new();
    while let Some((k, v)) = it.current() {
        let config = table::decode::<LifecycleTable>(v)?;
        if let Some(bucket) = table::get::<BucketTable>(db, k)?
            && bucket.object_id == config.bucket_object_id
        {
            let scan = table::get::<LifecycleScanTable>(db, k)?;
            out.push((bucket, config, scan));
        }
        it.advance();
    }
    it.status()?;
    Ok(out)
}

/// Runs the scanner until `stop`.
pub async fn run(svc: Arc<OmService>, settings: Settings, mut stop: watch::Receiver<bool>) {
    // At most a second between looks: a new leader (or a new configuration)
    // is scanning within a second; an idle look is one read of `lifecycle`.
    let tick = settings
        .interval
        .clamp(Duration::from_millis(100), Duration::from_secs(1));
    loop {
        tokio::select! {
            _ = tokio::time::sleep(tick) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        // Rounds until no bucket has a page to take.
        while svc.raft().is_leader() && !*stop.borrow() {
            match round(&svc, &settings, &stop).await {
                Ok(true) => {}
                Ok(false) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "lifecycle scan round failed");
                    break;
                }
            }
        }
        publish_lag(&svc);
    }
}

/// One page of every bucket that has one due; whether any had.
async fn round(
    svc: &Arc<OmService>,
    settings: &Settings,
    stop: &watch::Receiver<bool>,
) -> Result<bool, OmError> {
    let mut worked = false;
    for (bucket, config, stored) in configured(svc)? {
        if !svc.raft().is_leader() || *stop.borrow() {
            break;
        }
        let started = Instant::now();
        // The rules act with the rights of whoever set them, as they are now.
        let acting = config.configured_by.clone().map(|by| Caller {
            admin: svc.configured_admin(&by.user),
            ..by
        });
        let here = Resource::Bucket(&bucket.volume, &bucket.name);
        if let Some(c) = &acting
            && let Err(e) = authz::check(svc.db(), c, here, authz::DELETE, crate::rules::CURRENT)
        {
            metrics::counter!("om_lifecycle_pages_refused_total").increment(1);
            tracing::debug!(error = %e, bucket = %here, "lifecycle rules not applied: their \
                configuring principal lacks DELETE");
            continue;
        }
        let Some(mut page) = scan::page(
            svc.db(),
            &bucket,
            &config,
            stored.as_ref(),
            svc.now_ms(),
            settings.limits(),
        )?
        else {
            continue;
        };
        page.configurer_admin = acting.as_ref().is_some_and(|c| c.admin);
        let mut by_rule: std::collections::BTreeMap<String, u64> = Default::default();
        for item in &page.items {
            *by_rule.entry(item.rule_id.clone()).or_default() += 1;
        }
        let evaluated = page.evaluated;
        let completes = page.phase_done && scan::next_phase(page.phase) == scan::PHASE_IDLE;
        let pass_started = if page.start_pass {
            None
        } else {
            stored.as_ref().map(|s| s.pass_started_ms)
        };
        metrics::counter!("om_lifecycle_pages_total").increment(1);
        metrics::counter!("om_lifecycle_resume_seeks_total").increment(page.resume_seeks);
        match svc
            .propose_here(WriteId::default(), Op::LifecycleScan(page))
            .await
        {
            Ok(command_result::Result::LifecycleScan(r)) => {
                worked = true;
                metrics::counter!("om_lifecycle_evaluated_total").increment(evaluated);
                let mut actions = 0;
                let mut detail = Vec::new();
                for (name, n) in r.actions {
                    detail.push(format!("{name}={n}"));
                    metrics::counter!("om_lifecycle_actions_total", "action" => name).increment(n);
                    actions += n;
                }
                if actions > 0 {
                    let rules: Vec<String> =
                        by_rule.iter().map(|(id, n)| format!("{id}:{n}")).collect();
                    svc.audit_lifecycle(
                        here.to_string(),
                        acting.as_ref(),
                        format!(
                            "actions {}; eligible by rule {}",
                            detail.join(","),
                            rules.join(",")
                        ),
                    );
                }
                if completes && let Some(t0) = pass_started {
                    let secs = svc.now_ms().saturating_sub(t0) as f64 / 1000.0;
                    metrics::histogram!("om_lifecycle_pass_seconds").record(secs);
                }
                let wait = settings.page_time(evaluated, actions);
                if let Some(rest) = wait.checked_sub(started.elapsed()) {
                    tokio::time::sleep(rest).await;
                }
            }
            Ok(_) => {}
            Err(e) => {
                // A stale page (leadership moved, the configuration
                // changed): the next round reads the scan again.
                tracing::debug!(error = %e, bucket = %format!("{}/{}", bucket.volume, bucket.name),
                    "lifecycle page not applied");
                metrics::counter!("om_lifecycle_pages_refused_total").increment(1);
            }
        }
    }
    Ok(worked)
}

/// `om_lifecycle_cursor_lag_seconds`: how long the longest-waiting scan in
/// progress has gone without its cursor moving (0 when none is under way).
fn publish_lag(svc: &OmService) {
    let Ok(all) = configured(svc) else { return };
    let now = svc.now_ms();
    let lag = all
        .iter()
        .filter_map(|(b, c, s)| {
            s.as_ref()
                .filter(|s| scan::is_current(s, b, c) && s.phase != scan::PHASE_IDLE)
                .map(|s| now.saturating_sub(s.cursor_ms))
        })
        .max()
        .unwrap_or(0);
    metrics::gauge!("om_lifecycle_cursor_lag_seconds").set(lag as f64 / 1000.0);
}

/// On every node: once a bucket's pass completes having removed entries,
/// compacts the bucket's ranges of `keys` and `uploads` on this replica, so
/// the tombstones the pass left are dropped and listings over the bucket
/// step over none of them. Node-local work on identical data: replicas stay
/// byte-identical in content. A node compacts for passes completed after it
/// started (a restart does not compact everything again).
pub async fn compact_after_passes(svc: Arc<OmService>, mut stop: watch::Receiver<bool>) {
    let mut seen: Option<std::collections::HashMap<Vec<u8>, u64>> = None;
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Ok(done) = completed_passes(&svc) else {
            continue;
        };
        let Some(seen) = seen.as_mut() else {
            seen = Some(done.into_iter().map(|(k, at, _)| (k, at)).collect());
            continue;
        };
        for (bucket_key, completed_ms, removed) in done {
            if seen.get(&bucket_key) == Some(&completed_ms) {
                continue;
            }
            seen.insert(bucket_key.clone(), completed_ms);
            if !removed {
                continue;
            }
            let db = svc.db().clone();
            let r = tokio::task::spawn_blocking(move || {
                let mut prefix = bucket_key;
                prefix.push(b'/');
                let end = keys::prefix_end(&prefix);
                for cf in [keys::KEYS_CF, keys::UPLOADS_CF] {
                    let handle = table::cf(&db, cf)?;
                    db.compact_range_cf(handle, Some(prefix.as_slice()), end.as_deref());
                }
                Ok::<(), OmError>(())
            })
            .await;
            match r {
                Ok(Ok(())) => metrics::counter!("om_lifecycle_compactions_total").increment(1),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "compaction after a lifecycle pass failed")
                }
                Err(e) => tracing::warn!(error = %e, "compaction after a lifecycle pass failed"),
            }
        }
    }
}

/// Every object-store bucket's last completed pass: (bucket key, when,
/// whether it removed entries).
fn completed_passes(svc: &OmService) -> Result<Vec<(Vec<u8>, u64, bool)>, OmError> {
    let db = svc.db();
    let mut it = DeferredSeekIter::new(db, keys::LIFECYCLE_SCAN_CF, None, None)?;
    let mut out = Vec::new();
    while let Some((k, v)) = it.current() {
        let s = table::decode::<LifecycleScanTable>(v)?;
        if s.last_pass_completed_ms > 0 {
            let removed = s.last_pass_actions.values().any(|n| *n > 0);
            out.push((k.to_vec(), s.last_pass_completed_ms, removed));
        }
        it.advance();
    }
    it.status()?;
    Ok(out)
}
