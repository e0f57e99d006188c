//! The reply of protocol 0.12's FETCH_MESSAGES (109): a table of one 56-byte section header
//! per partition read, then each section's batches in table order. The request is
//! `command::FetchRequest`, decoded with the other commands.

/// A section header: `[partition_id u32][status u32][current_offset u64][messages_count u32]
/// [incarnation u64][owner_generation u64][metadata_op u64][next_offset u64][records_len u32]`.
pub const SECTION_HEADER_SIZE: usize = 56;

/// One section of a fetch reply; `status` 0 is a partition read, any other value the error
/// code that refused it (with no batches).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SectionHeader {
    pub partition_id: u32,
    pub status: u32,
    pub current_offset: u64,
    pub messages_count: u32,
    pub context: crate::answer::PartitionContext,
    /// Where the next fetch of the partition starts, also after an empty section.
    pub next_offset: u64,
    pub records_len: u32,
}

impl SectionHeader {
    pub fn encode(&self, out: &mut [u8]) {
        let mut at = 0;
        let mut put = |bytes: &[u8]| {
            out[at..at + bytes.len()].copy_from_slice(bytes);
            at += bytes.len();
        };
        put(&self.partition_id.to_le_bytes());
        put(&self.status.to_le_bytes());
        put(&self.current_offset.to_le_bytes());
        put(&self.messages_count.to_le_bytes());
        put(&self.context.incarnation.to_le_bytes());
        put(&self.context.owner_generation.to_le_bytes());
        put(&self.context.metadata_op.to_le_bytes());
        put(&self.next_offset.to_le_bytes());
        put(&self.records_len.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorCode;
    use crate::polling::PollingStrategy;
    use crate::reader::Reader;
    use crate::wire::command::FetchRequest;
    use crate::wire::decode::decode_fetch;

    /// A fetch body as the 0.12 client lays it out: consumer 1 (numeric), stream 1, topic 2.
    fn body(min_count: u32, count: u32, targets: &[(u32, u8, u32)]) -> Vec<u8> {
        let mut out = vec![1, 1, 4];
        out.extend_from_slice(&1u32.to_le_bytes());
        for id in [1u32, 2] {
            out.extend_from_slice(&[1, 4]);
            out.extend_from_slice(&id.to_le_bytes());
        }
        out.extend_from_slice(&1_000_000u64.to_le_bytes());
        out.extend_from_slice(&2_000_000u64.to_le_bytes());
        for value in [min_count, count, 1 << 20] {
            out.extend_from_slice(&value.to_le_bytes());
        }
        out.push(1);
        out.extend_from_slice(&(targets.len() as u32).to_le_bytes());
        for &(partition, kind, max_bytes) in targets {
            out.extend_from_slice(&partition.to_le_bytes());
            out.push(kind);
            out.extend_from_slice(&7u64.to_le_bytes());
            out.extend_from_slice(&max_bytes.to_le_bytes());
            out.extend_from_slice(&3u64.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
        }
        out
    }

    fn decode(bytes: &[u8]) -> Result<FetchRequest, ErrorCode> {
        decode_fetch(&mut Reader::new(bytes))
    }

    #[test]
    fn a_fetch_decodes_with_its_targets_and_terms() {
        let request = decode(&body(2, 10, &[(0, 1, 4096), (2, 5, 4096)])).unwrap();
        assert_eq!(
            (request.wait_us, request.request_timeout_us, request.min_count, request.count),
            (1_000_000, 2_000_000, 2, 10)
        );
        assert!(request.auto_commit);
        assert_eq!(request.targets.len(), 2);
        assert_eq!(request.targets[0].strategy, PollingStrategy::Offset(7));
        assert_eq!((request.targets[1].partition_id, request.targets[1].strategy), (2, PollingStrategy::Next));
        assert_eq!(request.targets[1].incarnation, 3);
    }

    #[test]
    fn fetches_the_client_would_not_send_are_refused() {
        let refused = [
            body(1, 10, &[]),
            body(0, 10, &[(0, 1, 4096)]),
            body(11, 10, &[(0, 1, 4096)]),
            body(1, 10, &[(0, 3, 4096)]),
            body(1, 10, &[(0, 1, 100)]),
            body(1, 10, &[(0, 1, 2 << 20)]),
            body(1, 10, &[(0, 1, 4096), (0, 5, 4096)]),
        ];
        for bytes in refused {
            assert_eq!(decode(&bytes), Err(ErrorCode::InvalidFormat));
        }
        let mut truncated = body(1, 10, &[(0, 1, 4096)]);
        truncated.pop();
        assert!(decode(&truncated).is_err());
    }

    #[test]
    fn a_section_header_is_56_bytes_in_the_client_order() {
        let header = SectionHeader {
            partition_id: 1,
            status: 2,
            current_offset: 3,
            messages_count: 4,
            next_offset: 8,
            records_len: 9,
            ..Default::default()
        };
        let mut out = [0u8; SECTION_HEADER_SIZE];
        header.encode(&mut out);
        assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), 1);
        assert_eq!(u64::from_le_bytes(out[8..16].try_into().unwrap()), 3);
        assert_eq!(u64::from_le_bytes(out[44..52].try_into().unwrap()), 8);
        assert_eq!(u32::from_le_bytes(out[52..56].try_into().unwrap()), 9);
    }
}
