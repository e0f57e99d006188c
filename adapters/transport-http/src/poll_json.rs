//! The JSON document of a poll reply, written straight from the binary batch records into
//! one buffer sized up front: payloads and user headers are base64-encoded in place, with no
//! string per message, no intermediate document and no escape scan (base64 and numbers need
//! none). The shape is what the client's `PolledMessages` reads.

use std::io::Write;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use rill_domain::batch::{self, BatchHeader};
use rill_domain::constants::BATCH_HEADER_SIZE;

/// The batch records of a poll reply body (`[partition][current_offset][count]`, then
/// records); a record cut short ends the walk.
fn records(body: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut position = 16;
    std::iter::from_fn(move || {
        if position + BATCH_HEADER_SIZE > body.len() {
            return None;
        }
        let length = BatchHeader::read(&body[position..]).batch_length as usize;
        let record = body.get(position..position.saturating_add(length))?;
        position += length.max(BATCH_HEADER_SIZE);
        Some(record)
    })
}

/// Appends `bytes` in base64 between quotes.
fn push_base64(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(b'"');
    let start = out.len();
    out.resize(start + bytes.len().div_ceil(3) * 4, 0);
    let written = BASE64.encode_slice(bytes, &mut out[start..]).expect("sized for the encoding");
    out.truncate(start + written);
    out.push(b'"');
}

/// Appends one record's messages, each preceded by a comma unless it is the very first.
fn push_record(out: &mut Vec<u8>, record: &[u8], first: &mut bool) {
    let header = BatchHeader::read(record);
    for frame in batch::frames(record) {
        let parts = batch::frame_parts(record, &frame);
        let id = u128::from_le_bytes(parts.id_bytes().try_into().unwrap_or([0; 16]));
        let timestamp_delta = u32::from_le_bytes(parts.header[28..32].try_into().unwrap_or([0; 4]));
        let (payload, user_headers) = (parts.payload, parts.user_headers);
        if !std::mem::take(first) {
            out.push(b',');
        }
        // Writing into a Vec cannot fail.
        let _ = write!(
            out,
            "{{\"header\":{{\"checksum\":{},\"id\":{id},\"offset\":{},\"timestamp\":{},\"origin_timestamp\":{},\
             \"user_headers_length\":{},\"payload_length\":{},\"reserved\":0}},\"payload\":",
            frame.checksum,
            header.base_offset + u64::from(frame.offset_delta),
            header.base_timestamp,
            header.origin_timestamp + u64::from(timestamp_delta),
            user_headers.len(),
            payload.len(),
        );
        push_base64(out, payload);
        if !user_headers.is_empty() {
            out.extend_from_slice(b",\"user_headers\":");
            push_base64(out, user_headers);
        }
        out.push(b'}');
    }
}

/// The poll reply `body` as the JSON document the client parses.
pub(crate) fn polled(body: &[u8]) -> Option<Vec<u8>> {
    let prefix = body.get(..16)?;
    let partition_id = u32::from_le_bytes(prefix[..4].try_into().ok()?);
    let current_offset = u64::from_le_bytes(prefix[4..12].try_into().ok()?);
    let count: usize = records(body).map(|record| batch::frames(record).count()).sum();
    // base64 of everything, plus the fixed text of each message (under 300 bytes).
    let mut out = Vec::with_capacity(body.len().div_ceil(3) * 4 + count * 300 + 100);
    let _ = write!(
        out,
        "{{\"partition_id\":{partition_id},\"current_offset\":{current_offset},\"count\":{count},\"messages\":["
    );
    let mut first = true;
    for record in records(body) {
        push_record(&mut out, record, &mut first);
    }
    out.extend_from_slice(b"]}");
    Some(out)
}

#[cfg(test)]
mod tests {
    use serde::Serialize;

    use super::*;

    /// The document as serde writes it from typed parts: what this module must match.
    #[derive(Serialize)]
    struct HeaderJson {
        checksum: u64,
        id: u128,
        offset: u64,
        timestamp: u64,
        origin_timestamp: u64,
        user_headers_length: u32,
        payload_length: u32,
        reserved: u64,
    }

    #[derive(Serialize)]
    struct MessageJson {
        header: HeaderJson,
        payload: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        user_headers: Option<String>,
    }

    #[derive(Serialize)]
    struct PolledJson {
        partition_id: u32,
        current_offset: u64,
        count: u32,
        messages: Vec<MessageJson>,
    }

    fn reference(body: &[u8]) -> Vec<u8> {
        let mut messages = Vec::new();
        for record in records(body) {
            let header = BatchHeader::read(record);
            for frame in batch::frames(record) {
                let parts = batch::frame_parts(record, &frame);
                let bytes = &record[frame.start..frame.end];
                let delta = u32::from_le_bytes(bytes[28..32].try_into().unwrap());
                messages.push(MessageJson {
                    header: HeaderJson {
                        checksum: frame.checksum,
                        id: u128::from_le_bytes(parts.id_bytes().try_into().unwrap()),
                        offset: header.base_offset + u64::from(frame.offset_delta),
                        timestamp: header.base_timestamp,
                        origin_timestamp: header.origin_timestamp + u64::from(delta),
                        user_headers_length: parts.user_headers.len() as u32,
                        payload_length: parts.payload.len() as u32,
                        reserved: 0,
                    },
                    payload: BASE64.encode(parts.payload),
                    user_headers: (!parts.user_headers.is_empty()).then(|| BASE64.encode(parts.user_headers)),
                });
            }
        }
        let document = PolledJson {
            partition_id: u32::from_le_bytes(body[..4].try_into().unwrap()),
            current_offset: u64::from_le_bytes(body[4..12].try_into().unwrap()),
            count: messages.len() as u32,
            messages,
        };
        serde_json::to_vec(&document).unwrap()
    }

    fn reply_body(batches: &[Vec<u8>]) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend(7u32.to_le_bytes());
        body.extend(41u64.to_le_bytes());
        body.extend(0u32.to_le_bytes());
        for batch in batches {
            body.extend(batch);
        }
        body
    }

    #[test]
    fn the_document_matches_serde_for_every_shape_of_message() {
        let payloads: Vec<Vec<u8>> = (0..6u8).map(|n| (0..n as usize * 7).map(|i| i as u8 ^ n).collect()).collect();
        let headers: &[&[u8]] = &[b"", b"\x01\x00\x00\x00k\x02\x05\x00\x00\x00value", b"", b"x", b"", b"yz"];
        let mut first: Vec<(u128, &[u8], &[u8])> = Vec::new();
        for (index, payload) in payloads.iter().enumerate() {
            first.push((u128::MAX - index as u128, payload, headers[index]));
        }
        let mut one = batch::build(&first, 1_700_000_000_000_000);
        batch::stamp(&mut one, 7, 30, 1_800_000_000_000_000);
        let mut two = batch::build(&[(5, b"tail", b"")], 9);
        batch::stamp(&mut two, 7, 36, 10);
        for body in [reply_body(&[]), reply_body(&[one.clone()]), reply_body(&[one, two])] {
            let written = polled(&body).unwrap();
            assert_eq!(String::from_utf8(written).unwrap(), String::from_utf8(reference(&body)).unwrap());
        }
        assert_eq!(polled(&[0; 10]), None, "a body shorter than its prefix");
    }
}
