//! User permissions as Iggy defines them (global, per stream, per topic), their wire blob,
//! and the access rules. Grants cascade downward: a global grant covers every stream, a
//! stream grant every topic in it, and `manage` implies `read`. Reading a topic includes
//! polling its messages (as in Iggy); sending is its own grant at each level.

use std::collections::BTreeMap;

use crate::error::ErrorCode;
use crate::reader::{Put, Reader};

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GlobalPermissions {
    pub manage_servers: bool,
    pub read_servers: bool,
    pub manage_users: bool,
    pub read_users: bool,
    pub manage_streams: bool,
    pub read_streams: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StreamPermissions {
    pub manage_stream: bool,
    pub read_stream: bool,
    pub manage_topics: bool,
    pub read_topics: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
    pub topics: BTreeMap<u32, TopicPermissions>,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TopicPermissions {
    pub manage_topic: bool,
    pub read_topic: bool,
    pub poll_messages: bool,
    pub send_messages: bool,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Permissions {
    pub global: GlobalPermissions,
    pub streams: BTreeMap<u32, StreamPermissions>,
}

fn flags<const N: usize>(reader: &mut Reader<'_>) -> Result<[bool; N], ErrorCode> {
    let mut out = [false; N];
    for flag in &mut out {
        *flag = reader.u8()? != 0;
    }
    Ok(out)
}

/// Bounds the blob: no more entries than its bytes could hold, so decoding cannot be made
/// to loop or allocate without input behind it.
fn has_next(reader: &mut Reader<'_>) -> Result<bool, ErrorCode> {
    Ok(reader.u8()? != 0)
}

impl Permissions {
    /// Everything: the root user's grants.
    pub fn all() -> Self {
        let g = GlobalPermissions {
            manage_servers: true,
            read_servers: true,
            manage_users: true,
            read_users: true,
            manage_streams: true,
            read_streams: true,
            manage_topics: true,
            read_topics: true,
            poll_messages: true,
            send_messages: true,
        };
        Self { global: g, streams: BTreeMap::new() }
    }

    pub fn decode(reader: &mut Reader<'_>) -> Result<Self, ErrorCode> {
        let [ms, rs, mu, ru, mst, rst, mt, rt, pm, sm] = flags::<10>(reader)?;
        let global = GlobalPermissions {
            manage_servers: ms,
            read_servers: rs,
            manage_users: mu,
            read_users: ru,
            manage_streams: mst,
            read_streams: rst,
            manage_topics: mt,
            read_topics: rt,
            poll_messages: pm,
            send_messages: sm,
        };
        let mut streams = BTreeMap::new();
        let mut more = has_next(reader)?;
        while more {
            let stream_id = reader.u32()?;
            let [manage_stream, read_stream, manage_topics, read_topics, poll_messages, send_messages] =
                flags::<6>(reader)?;
            let mut topics = BTreeMap::new();
            let mut more_topics = has_next(reader)?;
            while more_topics {
                let topic_id = reader.u32()?;
                let [manage_topic, read_topic, poll, send] = flags::<4>(reader)?;
                topics.insert(
                    topic_id,
                    TopicPermissions { manage_topic, read_topic, poll_messages: poll, send_messages: send },
                );
                more_topics = has_next(reader)?;
            }
            let stream = StreamPermissions {
                manage_stream,
                read_stream,
                manage_topics,
                read_topics,
                poll_messages,
                send_messages,
                topics,
            };
            streams.insert(stream_id, stream);
            more = has_next(reader)?;
        }
        Ok(Self { global, streams })
    }

    pub fn encode(&self, out: &mut Vec<u8>) {
        let g = &self.global;
        for flag in [
            g.manage_servers,
            g.read_servers,
            g.manage_users,
            g.read_users,
            g.manage_streams,
            g.read_streams,
            g.manage_topics,
            g.read_topics,
            g.poll_messages,
            g.send_messages,
        ] {
            out.put_u8(flag as u8);
        }
        out.put_u8(!self.streams.is_empty() as u8);
        for (index, (stream_id, s)) in self.streams.iter().enumerate() {
            out.put_u32(*stream_id);
            for flag in
                [s.manage_stream, s.read_stream, s.manage_topics, s.read_topics, s.poll_messages, s.send_messages]
            {
                out.put_u8(flag as u8);
            }
            out.put_u8(!s.topics.is_empty() as u8);
            for (topic_index, (topic_id, t)) in s.topics.iter().enumerate() {
                out.put_u32(*topic_id);
                for flag in [t.manage_topic, t.read_topic, t.poll_messages, t.send_messages] {
                    out.put_u8(flag as u8);
                }
                out.put_u8((topic_index + 1 < s.topics.len()) as u8);
            }
            out.put_u8((index + 1 < self.streams.len()) as u8);
        }
    }
}

/// Writes `[1][len u32][blob]`: the form permissions take inside requests and replies.
pub fn put_present(out: &mut Vec<u8>, permissions: &Permissions) {
    let mut blob = Vec::new();
    permissions.encode(&mut blob);
    out.put_u8(1);
    out.put_u32(blob.len() as u32);
    out.extend_from_slice(&blob);
}

/// What a command needs. Checked against a user's permissions by `allows`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    ReadServers,
    ManageServers,
    ReadUsers,
    ManageUsers,
    ReadStreams,
    CreateStream,
    ReadStream(u32),
    ManageStream(u32),
    ReadTopics(u32),
    CreateTopic(u32),
    ReadTopic(u32, u32),
    ManageTopic(u32, u32),
    Poll(u32, u32),
    Send(u32, u32),
}

impl Permissions {
    /// Whether these permissions grant `access`.
    pub fn allows(&self, access: Access) -> bool {
        let g = &self.global;
        let stream = |id: u32| self.streams.get(&id);
        let topic = |s: u32, t: u32| stream(s).and_then(|p| p.topics.get(&t));
        let stream_manages = |s: u32| g.manage_streams || stream(s).is_some_and(|p| p.manage_stream);
        let stream_reads = |s: u32| stream_manages(s) || g.read_streams || stream(s).is_some_and(|p| p.read_stream);
        let topics_manage = |s: u32| stream_manages(s) || g.manage_topics || stream(s).is_some_and(|p| p.manage_topics);
        let topics_read =
            |s: u32| topics_manage(s) || stream_reads(s) || g.read_topics || stream(s).is_some_and(|p| p.read_topics);
        let topic_manages = |s: u32, t: u32| topics_manage(s) || topic(s, t).is_some_and(|p| p.manage_topic);
        let topic_reads =
            |s: u32, t: u32| topic_manages(s, t) || topics_read(s) || topic(s, t).is_some_and(|p| p.read_topic);
        match access {
            Access::ReadServers => g.manage_servers || g.read_servers,
            Access::ManageServers => g.manage_servers,
            Access::ReadUsers => g.manage_users || g.read_users,
            Access::ManageUsers => g.manage_users,
            Access::ReadStreams => g.manage_streams || g.read_streams,
            Access::CreateStream => g.manage_streams,
            Access::ReadStream(s) => stream_reads(s),
            Access::ManageStream(s) => stream_manages(s),
            Access::ReadTopics(s) => topics_read(s),
            Access::CreateTopic(s) => topics_manage(s),
            Access::ReadTopic(s, t) => topic_reads(s, t),
            Access::ManageTopic(s, t) => topic_manages(s, t),
            // Reading a topic includes reading its messages, as in Iggy.
            Access::Poll(s, t) => {
                g.poll_messages
                    || topic_reads(s, t)
                    || stream(s).is_some_and(|p| p.poll_messages)
                    || topic(s, t).is_some_and(|p| p.poll_messages)
            }
            Access::Send(s, t) => {
                g.send_messages
                    || stream(s).is_some_and(|p| p.send_messages)
                    || topic(s, t).is_some_and(|p| p.send_messages)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scoped() -> Permissions {
        let mut topics = BTreeMap::new();
        topics.insert(3, TopicPermissions { manage_topic: true, ..Default::default() });
        topics.insert(4, TopicPermissions { poll_messages: true, ..Default::default() });
        let mut streams = BTreeMap::new();
        streams.insert(1, StreamPermissions { read_stream: true, topics, ..Default::default() });
        streams.insert(2, StreamPermissions { manage_stream: true, ..Default::default() });
        Permissions { global: GlobalPermissions { read_users: true, ..Default::default() }, streams }
    }

    #[test]
    fn blob_round_trips() {
        for permissions in [Permissions::default(), Permissions::all(), scoped()] {
            let mut out = Vec::new();
            permissions.encode(&mut out);
            let mut reader = Reader::new(&out);
            assert_eq!(Permissions::decode(&mut reader), Ok(permissions));
            assert_eq!(reader.remaining(), 0);
        }
    }

    #[test]
    fn truncated_blobs_are_refused() {
        let mut out = Vec::new();
        scoped().encode(&mut out);
        for len in 0..out.len() {
            assert!(Permissions::decode(&mut Reader::new(&out[..len])).is_err(), "prefix of {len} bytes");
        }
    }

    #[test]
    fn grants_cascade_downward() {
        let p = scoped();
        assert!(p.allows(Access::ReadUsers) && !p.allows(Access::ManageUsers));
        assert!(p.allows(Access::ReadStream(1)) && !p.allows(Access::ManageStream(1)));
        assert!(p.allows(Access::ReadTopic(1, 9)), "read_stream reads its topics");
        assert!(p.allows(Access::ManageTopic(1, 3)) && !p.allows(Access::ManageTopic(1, 9)));
        assert!(p.allows(Access::Poll(1, 4)) && p.allows(Access::Poll(1, 3)), "read rights include polling");
        assert!(!p.allows(Access::Poll(5, 1)) && !p.allows(Access::Send(1, 3)));
        assert!(
            p.allows(Access::ManageTopic(2, 7))
                && p.allows(Access::CreateTopic(2))
                && p.allows(Access::ReadTopic(2, 7))
        );
        assert!(!p.allows(Access::Send(2, 7)), "manage does not grant message rights");
        assert!(!p.allows(Access::ReadStream(5)) && !p.allows(Access::ReadStreams) && !p.allows(Access::CreateStream));
        let all = Permissions::all();
        assert!(
            all.allows(Access::ManageTopic(9, 9))
                && all.allows(Access::Send(1, 1))
                && all.allows(Access::ManageServers)
        );
    }
}
