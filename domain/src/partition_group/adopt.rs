//! Bringing a partition written outside its group into it: a node's copy that holds messages
//! the group's state has no record of (written by a single node, or by a cluster that did
//! not replicate partitions) is proposed to the group as it stands, and the first proposal
//! to commit becomes the group's record of that partition: its next offset, where its log
//! starts, its incarnation and its stored consumer offsets. Replicas without a copy fetch the
//! batches from a peer as for any gap; a replica whose own copy differs from the adopted one
//! (by end offset or last stamp) stops its group rather than serve other messages under the
//! same offsets. A proposal of an empty copy is a report that this replica holds nothing
//! of the partition: once every replica reported so, the partition is recorded empty.
//! Until then the nodes send nothing to a partition that predates their group: a node that
//! holds its messages may not have proposed them yet.
//!
//! `ADOPT_PARTITION` (165): `[partition u64][incarnation u64][next_offset u64][log_start u64]
//! [last_timestamp u64][replica u8][replicas u8][offsets u32]`, then `[kind u8][consumer u32]
//! [offset u64]` each.

use crate::error::ErrorCode;
use crate::reader::Reader;

/// A copy as a node proposes it to its group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Adoption {
    pub partition: u64,
    pub incarnation: u64,
    pub next_offset: u64,
    pub log_start: u64,
    /// The stamp of the copy's last message: with the end offset, what tells two copies
    /// written apart from one another.
    pub last_timestamp: u64,
    /// Which replica proposes it, of how many.
    pub replica: u8,
    pub replicas: u8,
    pub offsets: Vec<((u8, u32), u64)>,
}

impl Adoption {
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::with_capacity(46 + 13 * self.offsets.len());
        for value in [self.partition, self.incarnation, self.next_offset, self.log_start, self.last_timestamp] {
            body.extend_from_slice(&value.to_le_bytes());
        }
        body.extend_from_slice(&[self.replica, self.replicas]);
        body.extend_from_slice(&(self.offsets.len() as u32).to_le_bytes());
        for ((kind, consumer), offset) in &self.offsets {
            body.push(*kind);
            body.extend_from_slice(&consumer.to_le_bytes());
            body.extend_from_slice(&offset.to_le_bytes());
        }
        body
    }

    pub fn decode(body: &[u8]) -> Result<Self, ErrorCode> {
        let mut reader = Reader::new(body);
        let (partition, incarnation, next_offset) = (reader.u64()?, reader.u64()?, reader.u64()?);
        let (log_start, last_timestamp) = (reader.u64()?, reader.u64()?);
        let (replica, replicas) = (reader.u8()?, reader.u8()?);
        let count = reader.u32()? as usize;
        if count > reader.remaining() / 13 || log_start > next_offset || replica >= replicas || replicas > 32 {
            return Err(ErrorCode::InvalidFormat);
        }
        let mut offsets = Vec::with_capacity(count);
        for _ in 0..count {
            offsets.push(((reader.u8()?, reader.u32()?), reader.u64()?));
        }
        reader.finish()?;
        Ok(Self { partition, incarnation, next_offset, log_start, last_timestamp, replica, replicas, offsets })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_adoption_decodes_to_itself_and_refuses_damage() {
        let adoption = Adoption {
            partition: 9,
            incarnation: 70,
            next_offset: 120,
            log_start: 20,
            last_timestamp: 1_000,
            replica: 1,
            replicas: 3,
            offsets: vec![((1, 4), 99), ((2, 7), 3)],
        };
        let body = adoption.encode();
        assert_eq!(Adoption::decode(&body), Ok(adoption.clone()));
        for cut in 0..body.len() {
            assert!(Adoption::decode(&body[..cut]).is_err(), "cut at {cut}");
        }
        let backwards = Adoption { log_start: 121, ..adoption.clone() };
        assert_eq!(Adoption::decode(&backwards.encode()), Err(ErrorCode::InvalidFormat), "a start past the end");
        let stranger = Adoption { replica: 3, ..adoption };
        assert_eq!(Adoption::decode(&stranger.encode()), Err(ErrorCode::InvalidFormat), "a replica past the count");
    }
}
