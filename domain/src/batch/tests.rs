//! Batch format tests, including the golden SEND_MESSAGES vector of the protocol reference.

use super::*;
use proptest::prelude::*;

const ORIGIN: u64 = 1_700_000_000_000_000;

/// The golden batch: id 1 "hello" at ORIGIN, id 2 "world!" at ORIGIN + 10 µs.
fn golden() -> Vec<u8> {
    let mut batch = build(&[(1, b"hello", b""), (2, b"world!", b"")], ORIGIN);
    // Message 1 was produced 10 µs after the batch origin.
    let second = BATCH_HEADER_SIZE + MESSAGE_HEADER_SIZE + 5;
    batch[second + 28..second + 32].copy_from_slice(&10u32.to_le_bytes());
    let checksum = xxh3_64(&batch[second + 8..]);
    batch[second..second + 8].copy_from_slice(&checksum.to_le_bytes());
    let checksum = compute_checksum(&batch);
    batch[OFF_CHECKSUM..OFF_CHECKSUM + 8].copy_from_slice(&checksum.to_le_bytes());
    batch
}

#[test]
fn matches_the_golden_vector() {
    let batch = golden();
    assert_eq!(batch.len(), 363);
    assert_eq!(&batch[24..32], &[0x00, 0x40, 0x1e, 0x18, 0x24, 0x0a, 0x06, 0x00]);
    let frame_checksums: Vec<u64> = frames(&batch).map(|f| f.checksum).collect();
    assert_eq!(frame_checksums, vec![0xb9bfbddb9ea55c8e, 0x544587a53f761b9b]);
    assert_eq!(BatchHeader::read(&batch).checksum, 0xad56b8ecd4abb568);
    assert!(validate(&batch, 2).is_ok());
}

#[test]
fn detects_corruption() {
    let batch = golden();
    for position in [30, 100, BATCH_HEADER_SIZE + 20, batch.len() - 1] {
        let mut bad = batch.clone();
        bad[position] ^= 0x40;
        assert!(validate(&bad, 2).is_err(), "flip at {position} not detected");
        assert!(!verify_stored(&bad), "flip at {position} not detected on read");
    }
    assert_eq!(validate(&batch, 3), Err(ErrorCode::InvalidMessagesCount));
    assert!(validate(&batch[..batch.len() - 1], 2).is_err());
}

#[test]
fn stamping_reseals() {
    let mut batch = golden();
    stamp(&mut batch, 3, 100, 42);
    let header = BatchHeader::read(&batch);
    assert_eq!((header.partition_id, header.base_offset, header.base_timestamp), (3, 100, 42));
    assert_eq!(header.last_offset(), 101);
    assert!(verify_stored(&batch));
}

#[test]
fn slices_keep_deltas() {
    let mut batch = golden();
    stamp(&mut batch, 0, 100, 42);
    let mut out = Vec::new();
    assert_eq!(append_slice(&batch, 101, 5, &mut out), 1);
    assert!(verify_stored(&out));
    let frame = frames(&out).next().unwrap();
    assert_eq!(frame.offset_delta, 1);
    assert_eq!(&out[frame.end - 6..frame.end], b"world!");
    let mut whole = Vec::new();
    assert_eq!(append_slice(&batch, 90, 5, &mut whole), 2);
    assert_eq!(whole, batch);
    assert_eq!(append_slice(&batch, 102, 5, &mut Vec::new()), 0);
}

#[test]
fn rejects_empty_payloads_and_bad_headers() {
    assert_eq!(validate(&build(&[(1, b"", b"")], 0), 1), Err(ErrorCode::EmptyMessagePayload));
    assert!(validate(&build(&[(1, b"x", &[0, 1, 0, 0, 0])], 0), 1).is_err());
    let mut headers = Vec::new();
    tlv::put(&mut headers, "key", tlv::KIND_STRING, b"value");
    assert!(validate(&build(&[(1, b"x", &headers)], 0), 1).is_ok());
}

proptest! {
    #[test]
    fn built_batches_validate_and_slice(payloads in prop::collection::vec(prop::collection::vec(any::<u8>(), 1..64), 1..20), base in 0u64..1_000_000, from in 0u64..30, max in 1u32..30) {
        let messages: Vec<(u128, &[u8], &[u8])> = payloads.iter().enumerate().map(|(i, p)| (i as u128 + 1, p.as_slice(), &b""[..])).collect();
        let mut batch = build(&messages, 7);
        prop_assert!(validate(&batch, messages.len() as u32).is_ok());
        stamp(&mut batch, 1, base, 9);
        prop_assert!(verify_stored(&batch));
        let mut out = Vec::new();
        let taken = append_slice(&batch, base + from, max, &mut out);
        let expected = (messages.len() as u64).saturating_sub(from).min(max as u64) as u32;
        prop_assert_eq!(taken, expected);
        if taken > 0 {
            prop_assert!(verify_stored(&out));
            let first = frames(&out).next().unwrap();
            prop_assert_eq!(first.offset_delta as u64, from);
        }
    }
}

#[test]
fn a_flipped_payload_byte_is_damage_and_a_cut_batch_is_malformed() {
    let mut batch = golden();
    stamp(&mut batch, 0, 7, 42);
    assert_eq!(check_stored(&batch), StoredBatch::Valid);
    let mut rotten = batch.clone();
    rotten[BATCH_HEADER_SIZE + MESSAGE_HEADER_SIZE + 1] ^= 0x01;
    assert_eq!(check_stored(&rotten), StoredBatch::Damaged);
    let mut rotten_header = batch.clone();
    rotten_header[OFF_BASE_TIMESTAMP] ^= 0x80;
    assert_eq!(check_stored(&rotten_header), StoredBatch::Damaged, "the batch checksum covers the header");
    assert_eq!(check_stored(&batch[..batch.len() - 3]), StoredBatch::Malformed);
    let mut zeroed = batch.clone();
    zeroed[BATCH_HEADER_SIZE + 32..BATCH_HEADER_SIZE + 40].fill(0xff);
    assert_eq!(check_stored(&zeroed), StoredBatch::Malformed, "a frame length past the end");
}

#[test]
fn dropping_frames_renumbers_and_reseals() {
    let batch = build(&[(1, b"a", b""), (2, b"bb", b""), (3, b"ccc", b"")], ORIGIN);
    let mut kept = batch.clone();
    let (count, len) = drop_frames(&mut kept, &[true, false, true]);
    kept.truncate(len);
    assert_eq!(count, 1);
    assert_eq!(validate(&kept, 1).map(|h| h.message_count), Ok(1));
    assert_eq!(message_ids(&kept).collect::<Vec<_>>(), vec![2]);
    let mut kept = batch.clone();
    let (count, len) = drop_frames(&mut kept, &[false, true, false]);
    kept.truncate(len);
    assert_eq!(count, 2);
    assert!(validate(&kept, 2).is_ok(), "deltas 0 and 1, checksums recomputed");
    assert_eq!(message_ids(&kept).collect::<Vec<_>>(), vec![1, 3]);
    let mut untouched = batch.clone();
    assert_eq!(drop_frames(&mut untouched, &[true, true, true]), (0, batch.len()));
    assert_eq!(untouched, batch);
    assert_eq!(drop_frames(&mut untouched, &[false, false, false]), (3, batch.len()));
    assert_eq!(untouched, batch);
}

#[test]
fn a_part_is_where_the_selected_frames_lie() {
    let mut batch = build(&[(1, b"a", b""), (2, b"bb", b""), (3, b"ccc", b"")], ORIGIN);
    stamp(&mut batch, 0, 10, 42);
    let frame = |n: usize| frames(&batch).nth(n).unwrap();
    assert_eq!(part(&batch, 10, 5), Some((BATCH_HEADER_SIZE..batch.len(), 3)));
    assert_eq!(part(&batch, 11, 1), Some((frame(1).start..frame(1).end, 1)));
    assert_eq!(part(&batch, 0, 2), Some((frame(0).start..frame(1).end, 2)));
    assert_eq!((part(&batch, 13, 5), part(&batch, 10, 0)), (None, None));
    let mut out = vec![0u8; batch.len()];
    let (count, len) = copy_part(&batch, 11, 2, &mut out);
    assert_eq!(count, 2);
    assert!(verify_stored(&out[..len]), "a copied part is a batch of its own");
    assert_eq!(BatchHeader::read(&out).base_offset, 10, "base fields kept, deltas kept");
}

#[test]
fn a_builder_filling_in_place_matches_build_and_a_failed_fill_leaves_nothing() {
    let mut headers = Vec::new();
    tlv::put(&mut headers, "key", tlv::KIND_STRING, b"value");
    let mut builder = BatchBuilder::with_capacity(64);
    builder.push(1, b"hello", b"");
    // A fill that writes less than its slot (a decoder knowing only a bound).
    builder
        .push_with(2, 10, &headers, |slot| {
            slot[..6].copy_from_slice(b"world!");
            Ok::<usize, ()>(6)
        })
        .unwrap();
    assert_eq!(builder.push_with(3, 8, b"", |_| Err("bad input")), Err("bad input"));
    assert_eq!(builder.count(), 2);
    let built = builder.finish(ORIGIN);
    assert_eq!(built, build(&[(1, b"hello", b""), (2, b"world!", &headers)], ORIGIN));
    assert!(validate(&built, 2).is_ok());
}

/// `batch` as a 0.12 producer sends it: the producer section set, the checksum covering it.
fn with_producer(mut batch: Vec<u8>, id: u64, epoch: u16, base_sequence: u32) -> Vec<u8> {
    set_producer(&mut batch, BatchProducer { id, epoch, base_sequence });
    batch
}

#[test]
fn a_producer_section_is_read_checked_and_covered_by_the_checksum() {
    let batch = with_producer(golden(), 7 << 20, 2, 40);
    assert_eq!(validate(&batch, 2).map(|h| h.message_count), Ok(2));
    assert_eq!(producer(&batch), Ok(Some(BatchProducer { id: 7 << 20, epoch: 2, base_sequence: 40 })));
    assert_eq!(producer(&golden()), Ok(None));
    let mut tampered = batch.clone();
    tampered[OFF_PRODUCER_SEQUENCE] ^= 1;
    assert_eq!(validate(&tampered, 2), Err(ErrorCode::InvalidBatchChecksum), "the sequence is covered");
    let mut padded = batch.clone();
    padded[OFF_PRODUCER + 1] = 1;
    assert_eq!(validate(&padded, 2), Err(ErrorCode::InvalidFormat));
    let over = with_producer(golden(), u64::MAX, 0, 0);
    assert_eq!(producer(&over), Err(ErrorCode::InvalidFormat), "ids are 63 bits");
}

#[test]
fn stripping_producers_gives_back_batches_without_a_section_and_valid_checksums() {
    let plain = golden();
    let mut both = [with_producer(golden(), 1, 0, 0), plain.clone()].concat();
    assert!(any_producer(&both));
    strip_producers(&mut both);
    assert!(!any_producer(&both));
    assert_eq!(&both[..plain.len()], &plain[..], "the stripped batch is the batch sent without a producer");
    assert_eq!(validate(&both[plain.len()..], 2).map(|h| h.checksum), Ok(BatchHeader::read(&plain).checksum));
    assert_eq!(end_offset(&both), Some(2), "each golden batch holds offsets 0 and 1");
}
