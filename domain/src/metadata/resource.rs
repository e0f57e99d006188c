//! Protocol 0.12's UPDATE_RESOURCE applied: a patch of a stream, topic or user naming the
//! keys it sets and those it resets to their defaults. Only the keys the 0.12 catalog marks
//! updatable may change (a stream's and topic's `name`, a topic's `message_expiry` and
//! `max_topic_size`, a user's `username` and `status`); another key the create command
//! knows is refused with OptionNotUpdatable, a key nobody knows with UnsupportedOptionKey.
//! Every check happens before the first change.

use super::{Applied, Metadata};
use crate::error::ErrorCode;
use crate::identifier::Identifier;
use crate::metadata::user::{STATUS_ACTIVE, STATUS_INACTIVE};
use crate::topic_options::{self, TopicSettings};
use crate::wire::command::{ResourceTarget, TopicRef};
use crate::wire::tlv::{self, Entry};

/// The keys a create command of `scope` accepts: known, so an update of them is refused as
/// not updatable rather than unknown.
fn known(scope: u8, key: &str) -> bool {
    topic_options::option_catalog(scope).iter().any(|spec| spec.key == key)
}

fn refused(scope: u8, key: &str) -> ErrorCode {
    if known(scope, key) { ErrorCode::OptionNotUpdatable } else { ErrorCode::UnsupportedOptionKey }
}

fn text<'a>(entry: &Entry<'a>) -> Result<&'a str, ErrorCode> {
    match entry.value_kind {
        tlv::KIND_STRING => std::str::from_utf8(entry.value).map_err(|_| ErrorCode::InvalidOptionValue),
        _ => Err(ErrorCode::InvalidOptionValue),
    }
}

fn entries(options: &[u8]) -> Result<Vec<(&str, Entry<'_>)>, ErrorCode> {
    let decoded = tlv::decode_options(options)?;
    decoded
        .into_iter()
        .map(|entry| Ok((std::str::from_utf8(entry.key).map_err(|_| ErrorCode::InvalidFormat)?, entry)))
        .collect()
}

impl Metadata {
    pub(super) fn update_resource(
        &mut self,
        target: &ResourceTarget,
        reset: &[String],
        options: &[u8],
    ) -> Result<Applied, ErrorCode> {
        match target {
            ResourceTarget::Stream(stream) => self.patch_stream(stream, reset, options),
            ResourceTarget::Topic(topic) => self.patch_topic(topic, reset, options),
            ResourceTarget::User(user) => self.patch_user(user, reset, options),
        }
    }

    fn patch_stream(&mut self, stream: &Identifier, reset: &[String], options: &[u8]) -> Result<Applied, ErrorCode> {
        let scope = topic_options::SCOPE_STREAM;
        let stream_id = self.stream_id(stream)?;
        if let Some(key) = reset.first() {
            return Err(if key == "name" { ErrorCode::OptionNotResettable } else { refused(scope, key) });
        }
        let mut name = None;
        for (key, entry) in entries(options)? {
            match key {
                "name" => name = Some(text(&entry)?.to_owned()),
                other => return Err(refused(scope, other)),
            }
        }
        if let Some(name) = name {
            if name.is_empty() || name.len() > crate::constants::MAX_NAME_LENGTH {
                return Err(ErrorCode::InvalidStreamName);
            }
            if self.streams.values().any(|s| s.name == name && s.id != stream_id) {
                return Err(ErrorCode::StreamNameAlreadyExists);
            }
            self.streams.get_mut(&stream_id).expect("resolved above").name = name;
        }
        Ok(Applied::StreamUpdated { stream_id })
    }

    fn patch_topic(&mut self, topic: &TopicRef, reset: &[String], options: &[u8]) -> Result<Applied, ErrorCode> {
        let scope = topic_options::SCOPE_TOPIC;
        let (stream_id, topic_id) = self.topic_ids(topic)?;
        let stream = &self.streams[&stream_id];
        let current = &stream.topics[&topic_id];
        let (mut name, mut settings) = (current.name.clone(), current.settings.clone());
        let defaults = TopicSettings::default();
        for key in reset {
            match key.as_str() {
                "message_expiry" => settings.message_expiry_us = defaults.message_expiry_us,
                "max_topic_size" => settings.max_topic_size_bytes = defaults.max_topic_size_bytes,
                "name" => return Err(ErrorCode::OptionNotResettable),
                other => return Err(refused(scope, other)),
            }
        }
        for (key, entry) in entries(options)? {
            match key {
                "name" => name = text(&entry)?.to_owned(),
                "message_expiry" | "max_topic_size" => settings.apply_entry(key, &entry)?,
                other => return Err(refused(scope, other)),
            }
        }
        if name.is_empty() || name.len() > crate::constants::MAX_NAME_LENGTH {
            return Err(ErrorCode::InvalidTopicName);
        }
        if stream.topics.values().any(|t| t.name == name && t.id != topic_id) {
            return Err(ErrorCode::TopicNameAlreadyExists);
        }
        let topic = self.topic_mut(topic)?;
        (topic.name, topic.settings) = (name, settings);
        Ok(Applied::TopicUpdated { stream_id, topic_id })
    }

    fn patch_user(&mut self, user: &Identifier, reset: &[String], options: &[u8]) -> Result<Applied, ErrorCode> {
        let scope = topic_options::SCOPE_USER;
        if let Some(key) = reset.first() {
            return Err(if matches!(key.as_str(), "username" | "status") {
                ErrorCode::OptionNotResettable
            } else {
                refused(scope, key)
            });
        }
        let (mut username, mut status) = (None, None);
        for (key, entry) in entries(options)? {
            match key {
                "username" => username = Some(text(&entry)?.to_owned()),
                "status" => {
                    status = Some(match (entry.value_kind, text(&entry)) {
                        (_, Ok("active")) => STATUS_ACTIVE,
                        (_, Ok("inactive")) => STATUS_INACTIVE,
                        (tlv::KIND_UINT32 | tlv::KIND_RAW, _) if entry.value.len() <= 4 => {
                            let mut bytes = [0u8; 4];
                            bytes[..entry.value.len()].copy_from_slice(entry.value);
                            u8::try_from(u32::from_le_bytes(bytes)).map_err(|_| ErrorCode::InvalidUserStatus)?
                        }
                        _ => return Err(ErrorCode::InvalidUserStatus),
                    })
                }
                other => return Err(refused(scope, other)),
            }
        }
        if self.user_id(user)? == 0 && (username.is_some() || status.is_some()) {
            return Err(ErrorCode::CannotModifyRootUser);
        }
        self.update_user(user, &username, status)
    }
}
