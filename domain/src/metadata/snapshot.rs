//! The metadata state as bytes: what a checkpoint stores and what state transfer ships to a
//! replica that fell behind. Decoding checks every length against the bytes behind it, so
//! a damaged snapshot is an error, never a panic or an allocation out of proportion.

use std::collections::BTreeMap;

use super::{Metadata, Stream, Token, Topic, User};
use crate::consumer_group::ConsumerGroup;
use crate::error::ErrorCode;
use crate::permissions::Permissions;
use crate::reader::{Put, Reader};
use crate::topic_options::{Compression, TopicSettings};

/// Format version, first in every snapshot. Version 2 added consumer-group membership (a
/// version 1 snapshot restores every group with no members); version 3 the op that created
/// each stream and topic (0 from older snapshots); version 4 each stream's options block.
const SNAPSHOT_VERSION: u8 = 4;

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.put_u32(bytes.len() as u32);
    out.extend_from_slice(bytes);
}

fn bytes<'a>(reader: &mut Reader<'a>) -> Result<&'a [u8], ErrorCode> {
    let len = reader.u32()? as usize;
    reader.bytes(len)
}

fn text(reader: &mut Reader<'_>) -> Result<String, ErrorCode> {
    String::from_utf8(bytes(reader)?.to_vec()).map_err(|_| ErrorCode::InvalidFormat)
}

/// A count of records that each take at least `min_record` bytes: never more than the
/// bytes left could hold.
fn count(reader: &mut Reader<'_>, min_record: usize) -> Result<usize, ErrorCode> {
    let count = reader.u32()? as usize;
    if count.saturating_mul(min_record) > reader.remaining() { Err(ErrorCode::InvalidFormat) } else { Ok(count) }
}

fn put_settings(out: &mut Vec<u8>, settings: &TopicSettings) {
    out.put_u8(settings.compression as u8);
    for value in [
        settings.message_expiry_us,
        settings.max_topic_size_bytes,
        settings.segment_size_bytes,
        settings.size_required_to_save_bytes,
    ] {
        out.put_u64(value);
    }
    out.put_u32(settings.messages_required_to_save);
    out.put_u8(settings.enforce_fsync as u8);
    out.put_u8(settings.consumer_offset_fsync as u8);
    put_bytes(out, &settings.explicit);
}

fn settings(reader: &mut Reader<'_>) -> Result<TopicSettings, ErrorCode> {
    let compression = match reader.u8()? {
        1 => Compression::None,
        2 => Compression::Gzip,
        _ => return Err(ErrorCode::InvalidFormat),
    };
    let mut settings = TopicSettings {
        compression,
        message_expiry_us: reader.u64()?,
        max_topic_size_bytes: reader.u64()?,
        segment_size_bytes: reader.u64()?,
        size_required_to_save_bytes: reader.u64()?,
        messages_required_to_save: reader.u32()?,
        enforce_fsync: reader.u8()? != 0,
        consumer_offset_fsync: reader.u8()? != 0,
        deduplicate: None,
        explicit: bytes(reader)?.to_vec(),
    };
    // Create-only keys live in the client's own block, which the snapshot keeps as sent.
    let mut created = TopicSettings::default();
    if created.apply_options(&settings.explicit, false).is_ok() {
        settings.deduplicate = created.deduplicate;
    }
    Ok(settings)
}

fn put_topic(out: &mut Vec<u8>, topic: &Topic, version: u8) {
    out.put_u32(topic.id);
    put_bytes(out, topic.name.as_bytes());
    out.put_u64(topic.created_at);
    if version >= 3 {
        out.put_u64(topic.created_op);
    }
    put_settings(out, &topic.settings);
    out.put_u32(topic.partitions.len() as u32);
    for created_at in &topic.partitions {
        out.put_u64(*created_at);
    }
    out.put_u32(topic.consumer_groups.len() as u32);
    for (id, name) in &topic.consumer_groups {
        out.put_u32(*id);
        put_bytes(out, name.as_bytes());
    }
    out.put_u32(topic.next_group_id);
    if version < 2 {
        return;
    }
    out.put_u32(topic.memberships.len() as u32);
    for (id, group) in &topic.memberships {
        out.put_u32(*id);
        group.encode(out);
    }
}

fn topic(reader: &mut Reader<'_>, version: u8) -> Result<Topic, ErrorCode> {
    let id = reader.u32()?;
    let name = text(reader)?;
    let created_at = reader.u64()?;
    let created_op = if version >= 3 { reader.u64()? } else { 0 };
    let settings = settings(reader)?;
    let partitions = (0..count(reader, 8)?).map(|_| reader.u64()).collect::<Result<Vec<_>, _>>()?;
    let mut consumer_groups = BTreeMap::new();
    for _ in 0..count(reader, 8)? {
        let group_id = reader.u32()?;
        consumer_groups.insert(group_id, text(reader)?);
    }
    let next_group_id = reader.u32()?;
    let mut memberships: BTreeMap<u32, ConsumerGroup> =
        consumer_groups.keys().map(|id| (*id, ConsumerGroup::default())).collect();
    if version >= 2 {
        for _ in 0..count(reader, 24)? {
            let group_id = reader.u32()?;
            let group = ConsumerGroup::decode(reader)?;
            if !consumer_groups.contains_key(&group_id) {
                return Err(ErrorCode::InvalidFormat);
            }
            memberships.insert(group_id, group);
        }
    }
    Ok(Topic { id, name, created_at, created_op, settings, partitions, consumer_groups, next_group_id, memberships })
}

fn put_user(out: &mut Vec<u8>, user: &User) {
    out.put_u32(user.id);
    put_bytes(out, user.username.as_bytes());
    put_bytes(out, user.password_hash.as_bytes());
    out.put_u8(user.status);
    out.put_u64(user.created_at);
    match &user.permissions {
        None => out.put_u8(0),
        Some(permissions) => {
            out.put_u8(1);
            let mut blob = Vec::new();
            permissions.encode(&mut blob);
            put_bytes(out, &blob);
        }
    }
    out.put_u32(user.tokens.len() as u32);
    for (name, token) in &user.tokens {
        put_bytes(out, name.as_bytes());
        put_bytes(out, token.hash.as_bytes());
        out.put_u64(token.expiry_at);
    }
}

fn user(reader: &mut Reader<'_>) -> Result<User, ErrorCode> {
    let id = reader.u32()?;
    let username = text(reader)?;
    let password_hash = text(reader)?;
    let status = reader.u8()?;
    let created_at = reader.u64()?;
    let permissions = match reader.u8()? {
        0 => None,
        _ => {
            let mut blob = Reader::new(bytes(reader)?);
            let permissions = Permissions::decode(&mut blob)?;
            blob.finish()?;
            Some(permissions)
        }
    };
    let mut tokens = BTreeMap::new();
    for _ in 0..count(reader, 16)? {
        let name = text(reader)?;
        tokens.insert(name, Token { hash: text(reader)?, expiry_at: reader.u64()? });
    }
    Ok(User { id, username, password_hash, status, created_at, permissions, tokens })
}

impl Metadata {
    /// Every stream, topic, partition, group, user and token, in key order: equal states
    /// give equal bytes.
    pub fn snapshot(&self) -> Vec<u8> {
        self.snapshot_version(SNAPSHOT_VERSION)
    }

    /// The snapshot in format `version` (older ones for the tests that read them back).
    fn snapshot_version(&self, version: u8) -> Vec<u8> {
        let mut out = vec![version];
        out.put_u32(self.streams.len() as u32);
        for stream in self.streams.values() {
            out.put_u32(stream.id);
            put_bytes(&mut out, stream.name.as_bytes());
            out.put_u64(stream.created_at);
            if version >= 3 {
                out.put_u64(stream.created_op);
            }
            if version >= 4 {
                put_bytes(&mut out, &stream.options);
            }
            out.put_u32(stream.topics.len() as u32);
            for topic in stream.topics.values() {
                put_topic(&mut out, topic, version);
            }
        }
        out.put_u32(self.users.len() as u32);
        for user in self.users.values() {
            put_user(&mut out, user);
        }
        out
    }

    /// Rebuilds the state a snapshot describes.
    pub fn from_snapshot(bytes: &[u8]) -> Result<Self, ErrorCode> {
        let mut reader = Reader::new(bytes);
        let version = reader.u8()?;
        if !(1..=SNAPSHOT_VERSION).contains(&version) {
            return Err(ErrorCode::InvalidFormat);
        }
        let mut metadata = Metadata::default();
        for _ in 0..count(&mut reader, 20)? {
            let id = reader.u32()?;
            let name = text(&mut reader)?;
            let created_at = reader.u64()?;
            let created_op = if version >= 3 { reader.u64()? } else { 0 };
            let options = if version >= 4 { self::bytes(&mut reader)?.to_vec() } else { Vec::new() };
            crate::stream_options::stored_envelope(&options)?;
            let mut topics = BTreeMap::new();
            for _ in 0..count(&mut reader, 40)? {
                let topic = topic(&mut reader, version)?;
                topics.insert(topic.id, topic);
            }
            metadata.streams.insert(id, Stream { id, name, created_at, created_op, options, topics });
        }
        for _ in 0..count(&mut reader, 30)? {
            let user = user(&mut reader)?;
            metadata.users.insert(user.id, user);
        }
        reader.finish()?;
        Ok(metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identifier::Identifier;
    use crate::wire::command::{MetadataOp, TopicRef};

    fn sample() -> Metadata {
        let mut metadata = Metadata::default();
        let ops = [
            MetadataOp::CreateStream { name: "orders".into(), options: &[] },
            MetadataOp::CreateStream { name: "audit".into(), options: &[] },
            MetadataOp::CreateTopic {
                stream: Identifier::Numeric(0),
                partitions_count: 3,
                name: "eu".into(),
                options: &[],
            },
            MetadataOp::CreateConsumerGroup {
                topic: TopicRef { stream: Identifier::Numeric(0), topic: Identifier::Numeric(0) },
                name: "billing".into(),
            },
            MetadataOp::JoinGroup {
                group: crate::consumer_group::GroupKey { stream_id: 0, topic_id: 0, group_id: 0 },
                member: crate::consumer_group::MemberId { client: 5, client_id: 2, node: 1, boot: 8 },
            },
            MetadataOp::InsertUser {
                username: "ada".into(),
                password_hash: "$argon2id$hash".into(),
                status: 1,
                permissions: Some(Permissions::all()),
            },
            MetadataOp::InsertToken { user_id: 0, name: "ci-token".into(), token_hash: "abc".into(), expiry_at: 9 },
            MetadataOp::DeleteStream { stream: Identifier::Numeric(1) },
        ];
        for (index, op) in ops.iter().enumerate() {
            metadata.apply(op, 1 + index as u64, 1_000 + index as u64).expect("sample op applies");
        }
        metadata
    }

    #[test]
    fn a_snapshot_restores_the_same_state() {
        let metadata = sample();
        let bytes = metadata.snapshot();
        assert_eq!(Metadata::from_snapshot(&bytes), Ok(metadata.clone()));
        assert_eq!(Metadata::from_snapshot(&Metadata::default().snapshot()), Ok(Metadata::default()));
        assert_eq!(Metadata::from_snapshot(&bytes).unwrap().snapshot(), bytes, "equal states, equal bytes");
    }

    #[test]
    fn a_version_1_snapshot_restores_groups_without_members() {
        let metadata = sample();
        let mut v1 = metadata.clone();
        for stream in v1.streams.values_mut() {
            stream.created_op = 0;
            for topic in stream.topics.values_mut() {
                topic.created_op = 0;
                topic.memberships.values_mut().for_each(|group| *group = ConsumerGroup::default());
            }
        }
        let bytes = metadata.snapshot_version(1);
        assert_eq!(Metadata::from_snapshot(&bytes), Ok(v1));
        assert_ne!(metadata.group_states().map(|(_, g)| g.clone()).collect::<Vec<_>>(), vec![ConsumerGroup::default()]);
    }

    #[test]
    fn every_truncation_and_many_corruptions_are_errors_not_panics() {
        let bytes = sample().snapshot();
        for len in 0..bytes.len() {
            assert!(Metadata::from_snapshot(&bytes[..len]).is_err(), "truncated at {len}");
        }
        for position in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[position] ^= 0xff;
            let _ = Metadata::from_snapshot(&damaged);
        }
    }
}
