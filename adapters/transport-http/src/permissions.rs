//! Permissions in JSON, as the client's `Permissions` type writes them: `global` flags and
//! an optional `streams` map keyed by stream id (as a string), each with an optional
//! `topics` map.

use std::collections::BTreeMap;

use rill_domain::permissions::{GlobalPermissions, Permissions, StreamPermissions, TopicPermissions};
use serde::{Deserialize, Serialize};
use serde_json::Value;

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct GlobalJson {
    manage_servers: bool,
    read_servers: bool,
    manage_users: bool,
    read_users: bool,
    manage_streams: bool,
    read_streams: bool,
    manage_topics: bool,
    read_topics: bool,
    poll_messages: bool,
    send_messages: bool,
}

#[derive(Serialize, Deserialize, Default, Clone, Copy)]
#[serde(default)]
struct TopicJson {
    manage_topic: bool,
    read_topic: bool,
    poll_messages: bool,
    send_messages: bool,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
struct StreamJson {
    manage_stream: bool,
    read_stream: bool,
    manage_topics: bool,
    read_topics: bool,
    poll_messages: bool,
    send_messages: bool,
    topics: Option<BTreeMap<u32, TopicJson>>,
}

#[derive(Serialize, Deserialize, Default)]
#[serde(default)]
pub struct PermissionsJson {
    global: GlobalJson,
    streams: Option<BTreeMap<u32, StreamJson>>,
}

fn topic_json(topic: &TopicPermissions) -> TopicJson {
    TopicJson {
        manage_topic: topic.manage_topic,
        read_topic: topic.read_topic,
        poll_messages: topic.poll_messages,
        send_messages: topic.send_messages,
    }
}

fn stream_json(stream: &StreamPermissions) -> StreamJson {
    StreamJson {
        manage_stream: stream.manage_stream,
        read_stream: stream.read_stream,
        manage_topics: stream.manage_topics,
        read_topics: stream.read_topics,
        poll_messages: stream.poll_messages,
        send_messages: stream.send_messages,
        topics: (!stream.topics.is_empty()).then(|| stream.topics.iter().map(|(id, t)| (*id, topic_json(t))).collect()),
    }
}

pub fn to_json(permissions: &Permissions) -> Value {
    let g = &permissions.global;
    let document = PermissionsJson {
        global: GlobalJson {
            manage_servers: g.manage_servers,
            read_servers: g.read_servers,
            manage_users: g.manage_users,
            read_users: g.read_users,
            manage_streams: g.manage_streams,
            read_streams: g.read_streams,
            manage_topics: g.manage_topics,
            read_topics: g.read_topics,
            poll_messages: g.poll_messages,
            send_messages: g.send_messages,
        },
        streams: (!permissions.streams.is_empty())
            .then(|| permissions.streams.iter().map(|(id, s)| (*id, stream_json(s))).collect()),
    };
    serde_json::to_value(document).unwrap_or(Value::Null)
}

impl PermissionsJson {
    pub fn into_domain(self) -> Permissions {
        let g = self.global;
        let global = GlobalPermissions {
            manage_servers: g.manage_servers,
            read_servers: g.read_servers,
            manage_users: g.manage_users,
            read_users: g.read_users,
            manage_streams: g.manage_streams,
            read_streams: g.read_streams,
            manage_topics: g.manage_topics,
            read_topics: g.read_topics,
            poll_messages: g.poll_messages,
            send_messages: g.send_messages,
        };
        let streams = self
            .streams
            .unwrap_or_default()
            .into_iter()
            .map(|(id, s)| {
                let topics = s
                    .topics
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(topic_id, t)| {
                        let topic = TopicPermissions {
                            manage_topic: t.manage_topic,
                            read_topic: t.read_topic,
                            poll_messages: t.poll_messages,
                            send_messages: t.send_messages,
                        };
                        (topic_id, topic)
                    })
                    .collect();
                let stream = StreamPermissions {
                    manage_stream: s.manage_stream,
                    read_stream: s.read_stream,
                    manage_topics: s.manage_topics,
                    read_topics: s.read_topics,
                    poll_messages: s.poll_messages,
                    send_messages: s.send_messages,
                    topics,
                };
                (id, stream)
            })
            .collect();
        Permissions { global, streams }
    }
}
