//! What every HTTP handler reads: the gateway context, a metadata reader, the JWT keys and
//! the gateway to the shards, and the transport's settings.

use std::sync::{Arc, Mutex};

use axum::http::{HeaderMap, header};
use rill_application::GatewayContext;
use rill_application::ports::{Gateway, MetadataRead};
use rill_domain::metadata::Metadata;

use crate::jwt::Jwt;
use crate::serve::CorsSettings;

/// A metadata reader behind a trait object, so handlers need no type parameter.
pub(crate) trait ReadMetadata: Send {
    fn visit(&self, f: &mut dyn FnMut(&Metadata));
}

impl<M: MetadataRead + Send> ReadMetadata for M {
    fn visit(&self, f: &mut dyn FnMut(&Metadata)) {
        self.read(|metadata| f(metadata));
    }
}

/// What every handler reads.
pub struct HttpState {
    pub(crate) context: GatewayContext,
    pub(crate) metadata: Mutex<Box<dyn ReadMetadata>>,
    pub(crate) jwt: Jwt,
    pub(crate) gateway: Arc<dyn Gateway>,
}

/// HTTP settings: JWT (the signing secret, empty: made once and kept in the data
/// directory; token lifetime and clock skew), CORS, the request size cap, and TLS.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    pub jwt_secret: String,
    pub access_token_lifetime_s: u64,
    pub clock_skew_s: u64,
    pub max_request_size_bytes: usize,
    pub cors: CorsSettings,
    /// Where Prometheus scrapes (`[http.metrics] endpoint`), or `None` when metrics are off.
    pub metrics_endpoint: Option<String>,
    /// Serve the web console at `/ui` (`[http] web_ui`).
    pub web_ui: bool,
}

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

impl HttpState {
    pub(crate) fn read<R>(&self, f: impl FnOnce(&Metadata) -> R) -> R {
        let reader = self.metadata.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut f = Some(f);
        let mut out = None;
        reader.visit(&mut |metadata| {
            if let Some(f) = f.take() {
                out = Some(f(metadata));
            }
        });
        out.expect("a metadata reader always visits once")
    }
}
