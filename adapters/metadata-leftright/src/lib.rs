//! Committed metadata published through left-right: shard 0 holds the single write handle
//! and appends each committed operation; every shard reads through its own read handle,
//! without locks. `publish` returns only once readers see the operation.

use std::mem::ManuallyDrop;

use left_right::{Absorb, ReadHandle, ReadHandleFactory, WriteHandle};
use rill_application::ports::metadata_view::apply_committed;
use rill_application::ports::{MetadataPublish, MetadataRead};
use rill_domain::metadata::Metadata;

/// The copy left-right keeps twice.
#[derive(Clone, Default)]
struct View(Metadata);

/// One committed operation, as journaled, or a whole new state.
enum Committed {
    Op { op: u64, operation: u8, timestamp: u64, body: Vec<u8> },
    Replace(Metadata),
}

impl Absorb<Committed> for View {
    fn absorb_first(&mut self, op: &mut Committed, _other: &Self) {
        match op {
            Committed::Op { op, operation, timestamp, body } => {
                apply_committed(&mut self.0, *op, *operation, *timestamp, body)
            }
            Committed::Replace(metadata) => self.0 = metadata.clone(),
        }
    }

    fn sync_with(&mut self, first: &Self) {
        self.0 = first.0.clone();
    }
}

/// Shard 0's writer.
pub struct LeftRightPublisher {
    /// Never dropped: left-right frees both copies with the write handle, and threads that
    /// outlive shard 0's `Shard` (the HTTP thread, until the process exits) still read. The
    /// process frees it when it ends.
    write: ManuallyDrop<WriteHandle<View, Committed>>,
}

/// A shard's reader; create one per shard thread from the factory (a clone reads on the
/// same thread).
#[derive(Clone)]
pub struct LeftRightReader {
    read: ReadHandle<View>,
}

/// Makes more readers; it can be sent to other threads.
#[derive(Clone)]
pub struct ReaderFactory(ReadHandleFactory<View>);

impl ReaderFactory {
    pub fn reader(&self) -> LeftRightReader {
        LeftRightReader { read: self.0.handle() }
    }
}

/// Starts from the recovered metadata.
pub fn new(metadata: Metadata) -> (LeftRightPublisher, ReaderFactory) {
    let (mut write, read) = left_right::new_from_empty::<View, Committed>(View(metadata));
    write.publish();
    let factory = ReaderFactory(read.factory());
    (LeftRightPublisher { write: ManuallyDrop::new(write) }, factory)
}

impl MetadataPublish for LeftRightPublisher {
    fn publish(&mut self, op: u64, operation: u8, timestamp: u64, body: &[u8]) {
        self.write.append(Committed::Op { op, operation, timestamp, body: body.to_vec() });
        self.write.publish();
    }

    fn replace(&mut self, metadata: &Metadata) {
        self.write.append(Committed::Replace(metadata.clone()));
        self.write.publish();
    }
}

impl MetadataRead for LeftRightReader {
    fn read<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        let guard = self.read.enter().expect("the write handle is never dropped");
        f(&guard.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rill_domain::wire::codes::operation;

    #[test]
    fn readers_still_read_once_the_publisher_is_gone() {
        let (mut publisher, factory) = new(Metadata::default());
        let reader = factory.reader();
        publisher.publish(1, operation::CREATE_STREAM, 7, &[4, b'l', b'o', b'g', b's']);
        {
            // As when shard 0 ends and its `Shard`, with the publisher in it, goes.
            let _gone = publisher;
        }
        let names = |r: &LeftRightReader| r.read(|m| m.streams().map(|s| s.name.clone()).collect::<Vec<_>>());
        assert_eq!(names(&reader), vec!["logs".to_owned()]);
        assert_eq!(names(&factory.reader()), vec!["logs".to_owned()]);
    }

    #[test]
    fn readers_see_published_operations() {
        let (mut publisher, factory) = new(Metadata::default());
        let reader = factory.reader();
        assert_eq!(reader.read(|m| m.streams().count()), 0);
        let body = [6u8, b'o', b'r', b'd', b'e', b'r', b's'];
        publisher.publish(2, operation::CREATE_STREAM, 42, &body);
        let other_thread = factory.clone();
        let seen = std::thread::spawn(move || {
            other_thread.reader().read(|m| m.streams().map(|s| (s.name.clone(), s.created_at)).collect::<Vec<_>>())
        })
        .join()
        .unwrap();
        assert_eq!(seen, vec![("orders".to_owned(), 42)]);
        assert_eq!(reader.read(|m| m.streams().count()), 1);
    }
}
