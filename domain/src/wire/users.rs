//! Users, personal access tokens and consumer-group membership on the wire, and the
//! journal-only operations that replace secrets with their hashes.

use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::permissions::Permissions;
use crate::reader::{Put, Reader};
use crate::wire::codes::operation as op;
use crate::wire::command::{Command, MetadataOp, TopicRef};

/// Replicated operations that reach the use cases as commands, not as journal entries:
/// they carry secrets (hashed first) or ephemeral membership (never journaled).
pub fn is_user_command(operation: u8) -> bool {
    matches!(
        operation,
        op::CREATE_USER
            | op::CHANGE_PASSWORD
            | op::CREATE_PERSONAL_ACCESS_TOKEN
            | op::DELETE_PERSONAL_ACCESS_TOKEN
            | op::JOIN_CONSUMER_GROUP
            | op::LEAVE_CONSUMER_GROUP
    )
}

/// Operations decoded into `MetadataOp` by this module.
pub fn is_user_op(operation: u8) -> bool {
    matches!(
        operation,
        op::UPDATE_USER
            | op::DELETE_USER
            | op::UPDATE_PERMISSIONS
            | op::INSERT_USER
            | op::SET_PASSWORD
            | op::INSERT_TOKEN
            | op::REMOVE_TOKEN
    )
}

fn topic_ref(reader: &mut Reader<'_>) -> Result<TopicRef, ErrorCode> {
    Ok(TopicRef { stream: Identifier::decode(reader)?, topic: Identifier::decode(reader)? })
}

/// `[has u8]`, then `[len u32][Permissions]` when set; the length must match the blob.
fn optional_permissions(reader: &mut Reader<'_>) -> Result<Option<Permissions>, ErrorCode> {
    if reader.u8()? == 0 {
        return Ok(None);
    }
    let len = reader.u32()? as usize;
    let blob = reader.bytes(len)?;
    let mut inner = Reader::new(blob);
    let permissions = Permissions::decode(&mut inner)?;
    inner.finish()?;
    Ok(Some(permissions))
}

fn put_optional_permissions(out: &mut Vec<u8>, permissions: &Option<Permissions>) {
    match permissions {
        None => out.put_u8(0),
        Some(permissions) => crate::permissions::put_present(out, permissions),
    }
}

/// Options blocks on user requests: the SDK sends them empty, and users have no options.
fn no_options(reader: &mut Reader<'_>) -> Result<(), ErrorCode> {
    if crate::wire::tlv::decode_options(reader.rest())?.is_empty() {
        Ok(())
    } else {
        Err(ErrorCode::UnsupportedOptionKey)
    }
}

pub fn decode_command<'a>(operation: u8, reader: &mut Reader<'a>) -> Result<Command<'a>, ErrorCode> {
    Ok(match operation {
        op::CREATE_USER => {
            let username = reader.name()?;
            let password = reader.short_string()?;
            let status = reader.u8()?;
            let permissions = optional_permissions(reader)?;
            no_options(reader)?;
            Command::CreateUser { username, password, status, permissions }
        }
        op::CHANGE_PASSWORD => Command::ChangePassword {
            user: Identifier::decode(reader)?,
            current: reader.short_string()?,
            new: reader.short_string()?,
        },
        op::CREATE_PERSONAL_ACCESS_TOKEN => Command::CreateToken { name: reader.name()?, expiry_us: reader.u64()? },
        op::DELETE_PERSONAL_ACCESS_TOKEN => Command::DeleteToken { name: reader.name()? },
        op::JOIN_CONSUMER_GROUP => {
            Command::JoinConsumerGroup { topic: topic_ref(reader)?, group: Identifier::decode(reader)? }
        }
        op::LEAVE_CONSUMER_GROUP => {
            Command::LeaveConsumerGroup { topic: topic_ref(reader)?, group: Identifier::decode(reader)? }
        }
        _ => return Err(ErrorCode::InvalidCommand),
    })
}

pub fn decode_op<'a>(operation: u8, reader: &mut Reader<'a>) -> Result<MetadataOp<'a>, ErrorCode> {
    Ok(match operation {
        op::UPDATE_USER => {
            let user = Identifier::decode(reader)?;
            let username = if reader.u8()? != 0 { Some(reader.name()?) } else { None };
            let status = if reader.u8()? != 0 { Some(reader.u8()?) } else { None };
            no_options(reader)?;
            MetadataOp::UpdateUser { user, username, status }
        }
        op::DELETE_USER => MetadataOp::DeleteUser { user: Identifier::decode(reader)? },
        op::UPDATE_PERMISSIONS => MetadataOp::UpdatePermissions {
            user: Identifier::decode(reader)?,
            permissions: optional_permissions(reader)?,
        },
        op::INSERT_USER => MetadataOp::InsertUser {
            username: reader.name()?,
            password_hash: reader.short_string()?,
            status: reader.u8()?,
            permissions: optional_permissions(reader)?,
        },
        op::SET_PASSWORD => MetadataOp::SetPassword { user_id: reader.u32()?, password_hash: reader.short_string()? },
        op::INSERT_TOKEN => MetadataOp::InsertToken {
            user_id: reader.u32()?,
            name: reader.name()?,
            token_hash: reader.short_string()?,
            expiry_at: reader.u64()?,
        },
        op::REMOVE_TOKEN => MetadataOp::RemoveToken { user_id: reader.u32()?, name: reader.name()? },
        _ => return Err(ErrorCode::InvalidCommand),
    })
}

impl MetadataOp<'_> {
    /// The journal form of a journal-only operation: `(operation byte, body)`.
    pub fn encode_internal(&self) -> Option<(u8, Vec<u8>)> {
        let mut out = Vec::new();
        let operation = match self {
            MetadataOp::InsertUser { username, password_hash, status, permissions } => {
                out.put_name(username);
                out.put_name(password_hash);
                out.put_u8(*status);
                put_optional_permissions(&mut out, permissions);
                op::INSERT_USER
            }
            MetadataOp::SetPassword { user_id, password_hash } => {
                out.put_u32(*user_id);
                out.put_name(password_hash);
                op::SET_PASSWORD
            }
            MetadataOp::InsertToken { user_id, name, token_hash, expiry_at } => {
                out.put_u32(*user_id);
                out.put_name(name);
                out.put_name(token_hash);
                out.put_u64(*expiry_at);
                op::INSERT_TOKEN
            }
            MetadataOp::RemoveToken { user_id, name } => {
                out.put_u32(*user_id);
                out.put_name(name);
                op::REMOVE_TOKEN
            }
            other => return crate::wire::membership::encode_op(other),
        };
        Some((operation, out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_only_operations_round_trip() {
        let ops = [
            MetadataOp::InsertUser {
                username: "alice".into(),
                password_hash: "$argon2id$x".into(),
                status: 1,
                permissions: Some(Permissions::all()),
            },
            MetadataOp::SetPassword { user_id: 3, password_hash: "$argon2id$y".into() },
            MetadataOp::InsertToken { user_id: 3, name: "ci".into(), token_hash: "abc".into(), expiry_at: 9 },
            MetadataOp::RemoveToken { user_id: 3, name: "ci".into() },
        ];
        for original in ops {
            let (operation, body) = original.encode_internal().unwrap();
            let decoded = MetadataOp::decode(operation, &mut Reader::new(&body)).unwrap().unwrap();
            assert_eq!(decoded, original);
        }
    }

    #[test]
    fn journal_only_operations_are_refused_on_the_wire() {
        let (operation, body) = MetadataOp::RemoveToken { user_id: 0, name: "x".into() }.encode_internal().unwrap();
        assert!(Command::decode(operation, 0, &body).is_err());
    }
}
