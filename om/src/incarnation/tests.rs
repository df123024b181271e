use super::*;

fn db(dir: &Path) -> Arc<rocksdb::DB> {
    let mut o = rocksdb::Options::default();
    o.create_if_missing(true);
    Arc::new(rocksdb::DB::open(&o, dir.join("db")).unwrap())
}

fn member(dir: &Path, cluster: Option<&str>, history: bool) -> Arc<Incarnation> {
    let db = db(dir);
    let id = match cluster {
        Some(c) => crate::cluster_id::ClusterId::known(db, c),
        None => crate::cluster_id::ClusterId::new(db),
    };
    let i = Incarnation::open(dir, id).unwrap();
    i.set_history_probe(Arc::new(move || history));
    i
}

fn theirs(id: u64, superseded: &[u64]) -> Theirs {
    Theirs {
        id,
        superseded: superseded.to_vec(),
    }
}

fn refused(j: Judgement) -> &'static str {
    match j {
        Judgement::Refuse { reason, .. } => reason,
        Judgement::Admit => panic!("admitted"),
    }
}

#[test]
fn headers_parse_and_default_to_the_first_incarnation() {
    assert_eq!(Theirs::parse(None, None), Some(theirs(0, &[])));
    assert_eq!(
        Theirs::parse(Some("7"), Some("0,3")),
        Some(theirs(7, &[0, 3]))
    );
    assert_eq!(Theirs::parse(Some("7"), Some("")), Some(theirs(7, &[])));
    assert_eq!(Theirs::parse(Some("x"), None), None);
    assert_eq!(Theirs::parse(Some("7"), Some("1,,2")), None);
    // At most MAX_SUPERSEDED are read.
    let long = (0..100)
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",");
    assert_eq!(
        Theirs::parse(Some("1"), Some(&long))
            .unwrap()
            .superseded
            .len(),
        MAX_SUPERSEDED
    );
}

/// The drill: a survivor forces a new incarnation; an old member with its
/// history is refused by it and fences itself when told; a member that
/// sees the new incarnation while holding old history fences itself; an
/// empty member adopts it; the fence survives a restart.
#[test]
fn a_forced_incarnation_refuses_and_fences_the_old_one() {
    let (d1, d2, d3) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let survivor = member(d1.path(), Some("c"), true);
    assert_eq!(survivor.id(), 0);
    let x = survivor.start_new(42).unwrap();
    assert_ne!(x, 0);
    assert_eq!(survivor.superseded(), vec![0]);

    // An old member's RPC to the survivor: refused as superseded.
    assert_eq!(
        refused(survivor.judge(Some("c"), &theirs(0, &[]))),
        "INCARNATION_SUPERSEDED"
    );
    assert!(survivor.fenced().is_none());

    // The old member, told so by the refusal, fences itself and is silenced.
    let old = member(d2.path(), Some("c"), true);
    let status = crate::grpc::refusal(
        tonic::Code::FailedPrecondition,
        "INCARNATION_SUPERSEDED",
        "",
        "replaced",
    );
    om_raft_store::network::PeerIdentity::refused(&*old, &status);
    assert!(old.fenced().is_some());
    assert!(om_raft_store::network::PeerIdentity::silenced(&*old).is_some());
    assert_eq!(
        refused(old.judge(Some("c"), &theirs(0, &[]))),
        "MEMBER_SUPERSEDED"
    );
    // Still fenced after a restart; a restore (forget) clears it.
    drop(old);
    let again = Incarnation::open(
        d2.path(),
        crate::cluster_id::ClusterId::new(db(&d2.path().join("again"))),
    )
    .unwrap();
    assert!(again.fenced().is_some());
    forget(d2.path()).unwrap();
    let cleared = Incarnation::open(
        d2.path(),
        crate::cluster_id::ClusterId::new(db(&d2.path().join("cleared"))),
    )
    .unwrap();
    assert!(cleared.fenced().is_none());

    // An old member holding history that hears from the new incarnation
    // fences itself.
    let third = member(d3.path(), Some("c"), true);
    assert_eq!(
        refused(third.judge(Some("c"), &theirs(x, &[0]))),
        "MEMBER_SUPERSEDED"
    );
    assert!(third.fenced().is_some());
}

#[test]
fn an_empty_member_adopts_the_incarnation_that_replicates_to_it() {
    let d = tempfile::tempdir().unwrap();
    let fresh = member(d.path(), None, false);
    assert_eq!(fresh.judge(Some("c"), &theirs(9, &[0])), Judgement::Admit);
    assert_eq!(fresh.id(), 9);
    assert_eq!(fresh.superseded(), vec![0]);
    // Recorded: a restart (with the history it then holds) keeps it.
    drop(fresh);
    let back = member(d.path(), Some("c"), true);
    assert_eq!(back.id(), 9);
    assert_eq!(back.judge(Some("c"), &theirs(9, &[0])), Judgement::Admit);
    assert_eq!(
        refused(back.judge(Some("c"), &theirs(0, &[]))),
        "INCARNATION_SUPERSEDED"
    );
}

#[test]
fn unrelated_incarnations_are_refused_without_fencing() {
    let d = tempfile::tempdir().unwrap();
    let a = member(d.path(), Some("c"), true);
    a.start_new(1).unwrap();
    // Another survivor forced separately: neither replaced the other.
    assert_eq!(
        refused(a.judge(Some("c"), &theirs(12345, &[0]))),
        "INCARNATION_MISMATCH"
    );
    assert!(a.fenced().is_none());
    // A sender with no cluster state has nothing to judge.
    assert_eq!(a.judge(None, &theirs(0, &[])), Judgement::Admit);
}

#[test]
fn a_second_force_keeps_every_replaced_incarnation() {
    let d = tempfile::tempdir().unwrap();
    let a = member(d.path(), Some("c"), true);
    let x = a.start_new(1).unwrap();
    let y = a.start_new(2).unwrap();
    assert_eq!(a.superseded(), vec![x, 0]);
    assert_ne!(x, y);
    for old in [0, x] {
        assert_eq!(
            refused(a.judge(Some("c"), &theirs(old, &[]))),
            "INCARNATION_SUPERSEDED"
        );
    }
    // A probe answer from the newest incarnation fences a member of either.
    let d2 = tempfile::tempdir().unwrap();
    let b = member(d2.path(), Some("c"), true);
    assert!(b.check_peer("c", y, &[x, 0]));
    assert!(b.fenced().is_some());
    // From another cluster, nothing.
    let d3 = tempfile::tempdir().unwrap();
    let other = member(d3.path(), Some("c"), true);
    assert!(!other.check_peer("d", y, &[x, 0]));
    assert!(other.fenced().is_none());
}
