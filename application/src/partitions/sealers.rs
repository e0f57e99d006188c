//! Which key seals a partition's messages (encryption at rest): its stream's own key when
//! the stream has one (protocol 0.12's per-stream keys, `stream_keys`), else the server key
//! (streams created before per-stream keys), else none. A stream's key is opened from its
//! envelope once per shard and kept while the stream keeps that envelope.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use rill_domain::error::ErrorCode;
use rill_domain::stream_options;

use crate::encryption::{EncryptionKey, Encryptor};
use crate::ports::MetadataRead;
use crate::stream_keys::KeyWrapper;

/// A stream's envelope and the sealer of the key inside it.
type StreamSealer = (Vec<u8>, Rc<Encryptor>);

pub(crate) struct Sealers<R: MetadataRead> {
    /// The server key's sealer; `None` when encryption at rest is off.
    server: Option<Rc<Encryptor>>,
    wrapper: Option<KeyWrapper>,
    metadata: R,
    streams: RefCell<HashMap<u32, StreamSealer>>,
}

impl<R: MetadataRead> Sealers<R> {
    pub(crate) fn new(server_key: Option<&EncryptionKey>, metadata: R) -> Self {
        Self {
            server: server_key.map(|key| Rc::new(Encryptor::new(key))),
            wrapper: server_key.map(KeyWrapper::new),
            metadata,
            streams: RefCell::default(),
        }
    }

    /// The sealer of stream `stream_id`'s messages; `None` when they are stored in clear.
    /// A server without a key has no stream with one: such data refuses to start.
    pub(crate) fn for_stream(&self, stream_id: u32) -> Result<Option<Rc<Encryptor>>, ErrorCode> {
        let Some(wrapper) = &self.wrapper else { return Ok(None) };
        let mut streams = self.streams.borrow_mut();
        let opened = self.metadata.read(|metadata| {
            let stream = metadata.stream_by_id(stream_id)?;
            let envelope = stream_options::stored_envelope(&stream.options).ok().flatten()?;
            match streams.get(&stream_id) {
                Some((known, sealer)) if known.as_slice() == envelope => Some(Ok(sealer.clone())),
                _ => Some(Err(envelope.to_vec())),
            }
        });
        match opened {
            None => Ok(self.server.clone()),
            Some(Ok(sealer)) => Ok(Some(sealer)),
            Some(Err(envelope)) => {
                let sealer = Rc::new(Encryptor::new(&wrapper.unwrap(&envelope)?));
                streams.insert(stream_id, (envelope, sealer.clone()));
                Ok(Some(sealer))
            }
        }
    }
}
