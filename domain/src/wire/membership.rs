//! Consumer-group membership as journal-only metadata operations (docs/consumer-groups.md).
//! Clients join and leave with the protocol's 148/149; the shard that takes the request
//! journals who the member is (its session, node, process start and connection), and the
//! changes nobody asks for on the wire (a dropped connection, a restarted or lost node, a
//! hand-over) are journaled the same way, so every replica applies the same membership.

use crate::consumer_group::{GroupKey, MemberId};
use crate::error::ErrorCode;
use crate::reader::{Put, Reader};
use crate::wire::codes::operation as op;
use crate::wire::command::MetadataOp;

/// Operations decoded into `MetadataOp` by this module.
pub fn is_membership_op(operation: u8) -> bool {
    matches!(operation, op::JOIN_MEMBER | op::LEAVE_MEMBER | op::DROP_MEMBERS | op::SETTLE_GROUP)
}

fn put_group(out: &mut Vec<u8>, group: &GroupKey) {
    out.put_u32(group.stream_id);
    out.put_u32(group.topic_id);
    out.put_u32(group.group_id);
}

fn group(reader: &mut Reader<'_>) -> Result<GroupKey, ErrorCode> {
    Ok(GroupKey { stream_id: reader.u32()?, topic_id: reader.u32()?, group_id: reader.u32()? })
}

pub fn decode_op<'a>(operation: u8, reader: &mut Reader<'a>) -> Result<MetadataOp<'a>, ErrorCode> {
    Ok(match operation {
        op::JOIN_MEMBER => MetadataOp::JoinGroup { group: group(reader)?, member: MemberId::decode(reader)? },
        op::LEAVE_MEMBER => MetadataOp::LeaveGroup { group: group(reader)?, client: reader.u128()? },
        op::DROP_MEMBERS => {
            let (node, boot) = (reader.u8()?, reader.u64()?);
            let connection = match reader.u8()? {
                0 => None,
                _ => Some(reader.u32()?),
            };
            MetadataOp::DropMembers { node, boot, connection }
        }
        op::SETTLE_GROUP => {
            MetadataOp::SettleGroup { group: group(reader)?, synced: reader.u128()?, timeout_us: reader.u64()? }
        }
        _ => return Err(ErrorCode::InvalidCommand),
    })
}

/// The journal form of a membership operation: `(operation byte, body)`.
pub fn encode_op(metadata_op: &MetadataOp<'_>) -> Option<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let operation = match metadata_op {
        MetadataOp::JoinGroup { group, member } => {
            put_group(&mut out, group);
            member.encode(&mut out);
            op::JOIN_MEMBER
        }
        MetadataOp::LeaveGroup { group, client } => {
            put_group(&mut out, group);
            out.put_u128(*client);
            op::LEAVE_MEMBER
        }
        MetadataOp::DropMembers { node, boot, connection } => {
            out.put_u8(*node);
            out.put_u64(*boot);
            match connection {
                None => out.put_u8(0),
                Some(client_id) => {
                    out.put_u8(1);
                    out.put_u32(*client_id);
                }
            }
            op::DROP_MEMBERS
        }
        MetadataOp::SettleGroup { group, synced, timeout_us } => {
            put_group(&mut out, group);
            out.put_u128(*synced);
            out.put_u64(*timeout_us);
            op::SETTLE_GROUP
        }
        _ => return None,
    };
    Some((operation, out))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::command::Command;

    #[test]
    fn membership_operations_round_trip_and_are_refused_on_the_wire() {
        let group = GroupKey { stream_id: 1, topic_id: 2, group_id: 3 };
        let member = MemberId { client: 7 << 100 | 9, client_id: 4, node: 2, boot: 77 };
        let ops = [
            MetadataOp::JoinGroup { group, member },
            MetadataOp::LeaveGroup { group, client: member.client },
            MetadataOp::DropMembers { node: 2, boot: 77, connection: Some(4) },
            MetadataOp::DropMembers { node: 1, boot: 5, connection: None },
            MetadataOp::SettleGroup { group, synced: 0, timeout_us: 30_000_000 },
        ];
        for original in ops {
            let (operation, body) = original.encode_internal().expect("a journal-only op");
            let decoded = MetadataOp::decode(operation, &mut Reader::new(&body)).unwrap().unwrap();
            assert_eq!(decoded, original);
            assert!(Command::decode(operation, 0, &body).is_err(), "{operation} is not for clients");
            for len in 0..body.len() {
                let mut reader = Reader::new(&body[..len]);
                let cut = MetadataOp::decode(operation, &mut reader);
                assert!(cut.is_err() || reader.finish().is_err(), "{operation} cut at {len}");
            }
        }
    }
}
