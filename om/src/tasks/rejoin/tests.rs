use super::*;

fn peer(id: u64, state: bool, history: bool, leader: u64) -> PeerView {
    PeerView {
        node_id: id,
        has_state: state,
        has_history: history,
        admitted: true,
        last_log_index: 0,
        leader_id: leader,
        leader_raft_addr: if leader == 0 {
            String::new()
        } else {
            format!("h:{leader}")
        },
        cluster_id: String::new(),
        ..Default::default()
    }
}

#[test]
fn a_first_boot_waits_for_every_member_and_the_lowest_initializes() {
    let members = [1, 2, 3];
    assert!(matches!(
        decide(1, &members, &[peer(2, false, false, 0)]),
        Decision::Wait(_)
    ));
    let all_empty = [peer(2, false, false, 0), peer(3, false, false, 0)];
    assert_eq!(decide(1, &members, &all_empty), Decision::Initialize);
    // Not before every other member has decided to take part: none may
    // be left refusing votes when the cluster starts to serve.
    let mut deciding = all_empty.clone();
    deciding[1].admitted = false;
    assert!(matches!(decide(1, &members, &deciding), Decision::Wait(w) if w.contains("[3]")));
    assert_eq!(
        decide(
            2,
            &members,
            &[peer(1, false, false, 0), peer(3, false, false, 0)]
        ),
        Decision::OpenFresh
    );
    // The lowest id never initializes once any member holds state.
    let voted = [peer(2, true, false, 0), peer(3, false, false, 0)];
    assert_eq!(decide(1, &members, &voted), Decision::OpenFresh);
    // A member that initialized but elected nobody yet has no history:
    // the others take part in the first election.
    assert_eq!(
        decide(
            3,
            &members,
            &[peer(1, true, false, 0), peer(2, false, false, 0)]
        ),
        Decision::OpenFresh
    );
}

#[test]
fn a_cluster_with_history_is_rejoined_through_its_leader() {
    let members = [1, 2, 3];
    // The lowest id, wiped: one answer with history is enough, even
    // with a member missing; it never initializes.
    let d = decide(1, &members, &[peer(2, true, true, 3)]);
    assert_eq!(
        d,
        Decision::Rejoin {
            leader_id: 3,
            leader_raft_addr: "h:3".into()
        }
    );
    // The leader's own answer is preferred.
    let d = decide(
        2,
        &members,
        &[peer(1, true, true, 9), peer(3, true, true, 3)],
    );
    assert!(matches!(d, Decision::Rejoin { leader_id: 3, .. }));
    // History but no leader: wait (voting now could elect a leader that
    // lacks entries this node had acknowledged).
    assert!(matches!(
        decide(
            2,
            &members,
            &[peer(1, true, true, 0), peer(3, true, true, 0)]
        ),
        Decision::Wait(_)
    ));
    // A stale answer naming this node as leader is no leader.
    assert!(matches!(
        decide(2, &members, &[peer(1, true, true, 2)]),
        Decision::Wait(_)
    ));
}

#[test]
fn reset_only_when_the_leader_believes_in_entries_the_follower_lacks() {
    assert!(needs_reset(Some(40), None, None));
    assert!(needs_reset(Some(0), None, None));
    assert!(needs_reset(Some(40), Some(10), None));
    assert!(needs_reset(Some(40), None, Some(39)));
    assert!(!needs_reset(None, None, None));
    assert!(!needs_reset(Some(10), Some(10), None));
    assert!(!needs_reset(Some(10), Some(40), None));
    // The leader's log no longer reaches back to `matched`: openraft
    // sends a snapshot on its own.
    assert!(!needs_reset(Some(40), None, Some(40)));
    assert!(!needs_reset(Some(40), Some(10), Some(55)));
}

#[test]
fn a_node_not_admitted_refuses_votes_only() {
    for phase in [Phase::Sealed, Phase::CatchingUp] {
        let a = Admission::new(phase, "x");
        assert!(a.refuses("AppendEntries").is_none());
        assert!(a.refuses("StreamAppend").is_none());
        assert!(a.refuses("InstallSnapshot").is_none());
        assert!(a.refuses("Vote").is_some());
        assert!(a.refuses("TransferLeader").is_some());
    }
    let a = Admission::new(Phase::Sealed, "x");
    a.set(Phase::Open, String::new());
    assert!(a.refuses("Vote").is_none());
}

#[test]
fn a_member_verifying_its_incarnation_takes_no_part_in_raft() {
    let a = Admission::new(Phase::Verifying, "asking");
    for m in [
        "AppendEntries",
        "StreamAppend",
        "InstallSnapshot",
        "Vote",
        "TransferLeader",
    ] {
        assert!(a.refuses(m).is_some(), "{m}");
    }
    assert_eq!(a.phase(), Phase::Verifying);
    a.set(Phase::Open, String::new());
    assert!(a.refuses("AppendEntries").is_none());
}

#[test]
fn leadership_goes_to_the_most_up_to_date_other_voter() {
    let matched = BTreeMap::from([(1, Some(50)), (2, Some(40)), (3, Some(48)), (4, None)]);
    assert_eq!(handover_target(1, 2, &[1, 2, 3, 4], &matched), Some(3));
    assert_eq!(handover_target(1, 3, &[1, 2, 3, 4], &matched), Some(2));
    // Ties go to the lower id; a voter never heard from comes last.
    let tie = BTreeMap::from([(2, Some(5)), (3, Some(5)), (4, None)]);
    assert_eq!(handover_target(1, 9, &[1, 2, 3, 4], &tie), Some(2));
    assert_eq!(handover_target(1, 2, &[1, 2], &matched), None);
}

#[test]
fn the_marker_survives_and_goes() {
    let dir = tempfile::tempdir().unwrap();
    assert_eq!(read_marker(dir.path()).unwrap(), None);
    write_marker(dir.path(), 0).unwrap();
    assert_eq!(read_marker(dir.path()).unwrap(), Some(0));
    write_marker(dir.path(), 42).unwrap();
    assert_eq!(read_marker(dir.path()).unwrap(), Some(42));
    remove_marker(dir.path()).unwrap();
    assert_eq!(read_marker(dir.path()).unwrap(), None);
    remove_marker(dir.path()).unwrap();
}
