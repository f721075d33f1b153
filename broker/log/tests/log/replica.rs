//! A follower's replica: copying its leader's batches, diverging and truncating to its
//! leader's epochs, starting again at its leader's log start.

use super::*;

/// The bytes of the log from `from` to its end, as a follower's fetch would carry them.
fn raw_from(log: &Log, from: i64) -> Vec<u8> {
    match log.read(from, 1 << 24, log.log_end_offset(), true).expect("read") {
        ReadStart::Empty => Vec::new(),
        ReadStart::Plan(p) => p.execute().expect("execute").to_vec(),
    }
}

/// A leader and a follower (small segments) that both hold offsets 0..30 of epoch 0.
fn leader_and_follower(ld: &Path, fd: &Path) -> Result<(Log, Log), Box<dyn std::error::Error>> {
    let mut leader = open(ld, small(), true, 0);
    let mut follower = open(fd, small(), true, 0);
    for i in 0..3 {
        append_epoch(&mut leader, 10, 1_000 + i, 0);
    }
    follower.append_as_follower(&raw_from(&leader, 0), 2_000)?;
    Ok((leader, follower))
}

#[test]
fn a_follower_copies_batches_diverges_and_truncates_to_its_leaders_epochs() -> R {
    let (ld, fd) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let mut leader = open(ld.path(), small(), true, 0);
    let mut follower = open(fd.path(), small(), true, 0);
    // Epoch 0: offsets 0..30 on both (the follower copies with offsets and epochs kept).
    for i in 0..3 {
        append_epoch(&mut leader, 10, 1_000 + i, 0);
    }
    let r = follower.append_as_follower(&raw_from(&leader, 0), 2_000)?;
    assert_eq!((r.base_offset, r.last_offset, follower.log_end_offset()), (0, 29, 30));
    assert!(follower.append_as_follower(&raw_from(&leader, 10), 2_000).is_err(), "offsets must continue the log");
    // The follower then leads epoch 1 alone and writes 30..60 (never replicated, small
    // segments: the cut will land in a sealed segment); the old leader comes back as leader of
    // epoch 2 with 30..45 of its own.
    for i in 0..3 {
        append_epoch(&mut follower, 10, 3_000 + i, 1);
    }
    assert!(follower.segment_count() > 1);
    append_epoch(&mut leader, 15, 4_000, 2);
    assert_eq!(follower.latest_epoch(), Some((1, 30)));
    // KIP-279: the follower asks for its latest epoch (1); the leader never had it and answers
    // with epoch 0, which ends at 30; the follower cuts there (its own end of epoch 0 is 30 too).
    let (epoch, end) = leader.end_offset_for_epoch(1);
    assert_eq!((epoch, end), (0, 30));
    let (_, own_end) = follower.end_offset_for_epoch(epoch);
    assert_eq!(follower.truncate_to(end.min(own_end), 5_000)?, 30);
    assert_eq!(follower.latest_epoch(), Some((0, 0)));
    follower.append_as_follower(&raw_from(&leader, 30), 5_000)?;
    assert_eq!(follower.log_end_offset(), 45);
    follower.set_high_watermark(45);
    leader.set_high_watermark(45);
    assert_eq!(read_all(&follower, 0), read_all(&leader, 0), "the follower now holds the leader's log");
    assert_eq!(follower.end_offset_for_epoch(0), (0, 30));
    assert_eq!(follower.end_offset_for_epoch(2), (2, 45));
    // The epochs survive a reopen; a mid-batch cut drops the whole batch.
    follower.close(6_000)?;
    let mut follower = open(fd.path(), small(), true, 45);
    assert_eq!(follower.latest_epoch(), Some((2, 30)));
    assert_eq!(follower.truncate_to(35, 7_000)?, 30);
    assert_eq!(follower.latest_epoch(), Some((0, 0)));
    // A leadership that wrote nothing leaves an epoch at the log end; truncating to the log end
    // drops it (the follower's next question uses an epoch the log holds).
    follower.assign_epoch(5)?;
    assert_eq!(follower.latest_epoch(), Some((5, 30)));
    assert_eq!(follower.truncate_to(30, 8_000)?, 30);
    assert_eq!(follower.latest_epoch(), Some((0, 0)));
    Ok(())
}

#[test]
fn a_follower_left_below_its_leaders_log_start_starts_again_there() -> R {
    let (ld, fd) = (tempfile::tempdir()?, tempfile::tempdir()?);
    let (mut leader, mut follower) = leader_and_follower(ld.path(), fd.path())?;
    // The follower is away; the leader writes on and deletes everything before 60.
    for i in 0..6 {
        append_epoch(&mut leader, 10, 2_000 + i, 1);
    }
    leader.set_high_watermark(leader.log_end_offset());
    leader.delete_records_before(60)?;
    assert!(leader.read(30, 1 << 16, 90, true).is_err(), "the follower's fetch offset is out of range");
    follower.truncate_fully_and_start_at(60, 3_000)?;
    assert_eq!((follower.log_start_offset(), follower.log_end_offset(), follower.high_watermark()), (60, 60, 60));
    assert_eq!(follower.latest_epoch(), None);
    assert_eq!(follower.segment_base_offsets(), vec![60]);
    follower.append_as_follower(&raw_from(&leader, 60), 3_000)?;
    assert_eq!(follower.log_end_offset(), 90);
    assert_eq!(follower.latest_epoch(), Some((1, 60)));
    // The new start survives a crash without any checkpoint (the segment is named by it).
    drop(follower);
    let mut follower = open(fd.path(), small(), false, 0);
    assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (60, 90));
    follower.set_high_watermark(90);
    assert_eq!(read_all(&follower, 60), read_all(&leader, 60));

    // The leader's start inside a batch (65, in 60..70): a follower at 65 gets the whole batch
    // from 60 and starts there; its log start is then moved up as the leader's.
    leader.delete_records_before(65)?;
    follower.truncate_fully_and_start_at(65, 4_000)?;
    assert_eq!(follower.segment_base_offsets(), vec![65]);
    follower.append_as_follower(&raw_from(&leader, 65), 4_000)?;
    assert_eq!((follower.log_start_offset(), follower.log_end_offset()), (60, 90));
    follower.set_high_watermark(90);
    follower.delete_records_before(65)?;
    assert_eq!(read_all(&follower, 65), read_all(&leader, 65));
    Ok(())
}
