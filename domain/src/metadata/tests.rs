//! Metadata state machine tests: id allocation, name rules, partitions, refusals.

use super::*;

fn create_stream(md: &mut Metadata, name: &str) -> Result<Applied, ErrorCode> {
    md.apply(&MetadataOp::CreateStream { name: name.into(), options: &[] }, 1, 1)
}

fn topic_ref(stream: u32, topic: u32) -> TopicRef {
    TopicRef { stream: Identifier::Numeric(stream), topic: Identifier::Numeric(topic) }
}

#[test]
fn stream_ids_are_lowest_free_from_zero() {
    let mut md = Metadata::default();
    assert_eq!(create_stream(&mut md, "a"), Ok(Applied::StreamCreated { stream_id: 0 }));
    assert_eq!(create_stream(&mut md, "b"), Ok(Applied::StreamCreated { stream_id: 1 }));
    md.apply(&MetadataOp::DeleteStream { stream: Identifier::Numeric(0) }, 2, 2).unwrap();
    assert_eq!(create_stream(&mut md, "c"), Ok(Applied::StreamCreated { stream_id: 0 }));
    assert_eq!(create_stream(&mut md, "b"), Err(ErrorCode::StreamNameAlreadyExists));
    assert_eq!(md.stream_id(&Identifier::Name("c".into())), Ok(0));
}

#[test]
fn topics_and_partitions() {
    let mut md = Metadata::default();
    create_stream(&mut md, "s").unwrap();
    let create = MetadataOp::CreateTopic {
        stream: Identifier::Name("s".into()),
        partitions_count: 3,
        name: "t".into(),
        options: &[],
    };
    assert_eq!(md.apply(&create, 5, 5), Ok(Applied::TopicCreated { stream_id: 0, topic_id: 0 }));
    assert_eq!(md.apply(&create, 5, 5), Err(ErrorCode::TopicNameAlreadyExists));
    let add = MetadataOp::CreatePartitions { topic: topic_ref(0, 0), count: 2 };
    assert_eq!(md.apply(&add, 6, 6), Ok(Applied::PartitionsCreated { stream_id: 0, topic_id: 0, first: 3, count: 2 }));
    let remove = MetadataOp::DeletePartitions { topic: topic_ref(0, 0), count: 4 };
    assert_eq!(
        md.apply(&remove, 7, 7),
        Ok(Applied::PartitionsDeleted { stream_id: 0, topic_id: 0, first: 1, count: 4 })
    );
    assert_eq!(md.topic(&topic_ref(0, 0)).unwrap().partitions.len(), 1);
    let too_many = MetadataOp::DeletePartitions { topic: topic_ref(0, 0), count: 2 };
    assert_eq!(md.apply(&too_many, 8, 8), Err(ErrorCode::InvalidPartitionsCount));
}

#[test]
fn refusals_leave_state_untouched() {
    let mut md = Metadata::default();
    create_stream(&mut md, "s").unwrap();
    let before = md.clone();
    let bad_options = [2u8, 3, 0, 0, 0, b'b', b'a', b'd', 2, 1, 0, 0, 0, b'x'];
    let create = MetadataOp::CreateTopic {
        stream: Identifier::Numeric(0),
        partitions_count: 1,
        name: "t".into(),
        options: &bad_options,
    };
    assert_eq!(md.apply(&create, 1, 1), Err(ErrorCode::UnsupportedOptionKey));
    let missing =
        MetadataOp::CreateTopic { stream: Identifier::Numeric(9), partitions_count: 1, name: "t".into(), options: &[] };
    assert_eq!(md.apply(&missing, 1, 1), Err(ErrorCode::StreamIdNotFound));
    let too_many = MetadataOp::CreateTopic {
        stream: Identifier::Numeric(0),
        partitions_count: 1001,
        name: "t".into(),
        options: &[],
    };
    assert_eq!(md.apply(&too_many, 1, 1), Err(ErrorCode::InvalidPartitionsCount));
    assert_eq!(md, before);
}

#[test]
fn update_topic_renames_and_checks_keys() {
    let mut md = Metadata::default();
    create_stream(&mut md, "s").unwrap();
    for name in ["a", "b"] {
        let create = MetadataOp::CreateTopic {
            stream: Identifier::Numeric(0),
            partitions_count: 1,
            name: name.into(),
            options: &[],
        };
        md.apply(&create, 1, 1).unwrap();
    }
    let clash = MetadataOp::UpdateTopic { topic: topic_ref(0, 0), name: "b".into(), options: &[] };
    assert_eq!(md.apply(&clash, 2, 2), Err(ErrorCode::TopicNameAlreadyExists));
    let rename = MetadataOp::UpdateTopic { topic: topic_ref(0, 0), name: "c".into(), options: &[] };
    assert_eq!(md.apply(&rename, 2, 2), Ok(Applied::TopicUpdated { stream_id: 0, topic_id: 0 }));
    assert_eq!(md.topic_by_ids(0, 0).unwrap().name, "c");
}
