//! Metadata views for a single-threaded simulated server: every shard reads one shared
//! copy, and publishing applies the committed operation to it.

use std::cell::RefCell;
use std::rc::Rc;

use rill_application::ports::metadata_view::apply_committed;
use rill_application::ports::{MetadataPublish, MetadataRead};
use rill_domain::metadata::Metadata;

#[derive(Debug, Clone, Default)]
pub struct SimMetadata {
    metadata: Rc<RefCell<Metadata>>,
}

impl SimMetadata {
    pub fn new(metadata: Metadata) -> Self {
        Self { metadata: Rc::new(RefCell::new(metadata)) }
    }
}

impl MetadataRead for SimMetadata {
    fn read<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        f(&self.metadata.borrow())
    }
}

impl MetadataPublish for SimMetadata {
    fn publish(&mut self, op: u64, operation: u8, timestamp: u64, body: &[u8]) {
        apply_committed(&mut self.metadata.borrow_mut(), op, operation, timestamp, body);
    }

    fn replace(&mut self, metadata: &Metadata) {
        *self.metadata.borrow_mut() = metadata.clone();
    }
}
