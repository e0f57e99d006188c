//! The HTTP transport on axum. It runs on its own thread with a single-threaded tokio
//! runtime (axum's home), beside the shards, and reads what it serves lock-free: the
//! shared partition table and memory pool, and a metadata reader of its own.
//!
//! Routes so far: `GET /ping`; login by password or personal access token, token refresh
//! and logout (JWTs); `GET /metrics` (Prometheus text) and `GET /stats` (JSON) for a bearer
//! JWT or personal access token of a user with read_servers.

mod auth;
mod jwt;
mod metrics;

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post};
use rill_application::Shared;
use rill_application::ports::MetadataRead;
use rill_domain::permissions::Access;

/// What every handler reads.
pub struct HttpState<M> {
    shared: Arc<Shared>,
    metadata: Mutex<M>,
    jwt: jwt::Jwt,
}

/// JWT settings: the signing secret (empty: made once and kept in the data directory) and
/// the access-token lifetime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSettings {
    pub jwt_secret: String,
    pub access_token_lifetime_s: u64,
    pub clock_skew_s: u64,
}

/// Wall-clock microseconds, for token expiry checks.
pub(crate) fn now_us() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as u64)
}

/// The bearer token of a request, if any.
pub(crate) fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers.get(header::AUTHORIZATION)?.to_str().ok()?.strip_prefix("Bearer ").map(str::trim)
}

impl<M: MetadataRead> HttpState<M> {
    fn read<R>(&self, f: impl FnOnce(&rill_domain::metadata::Metadata) -> R) -> R {
        self.metadata.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).read(f)
    }

    /// The user a bearer token (a JWT from login, or a personal access token) belongs to,
    /// if that user holds `access`.
    fn authorize(&self, headers: &HeaderMap, access: Access) -> Result<u32, Box<Response>> {
        let unauthorized = || {
            Box::new(
                (StatusCode::UNAUTHORIZED, [(header::WWW_AUTHENTICATE, "Bearer")], "missing or invalid token\n")
                    .into_response(),
            )
        };
        let token = bearer(headers).ok_or_else(unauthorized)?;
        let user_id = self
            .jwt
            .verify(token)
            .filter(|&id| self.active(id))
            .or_else(|| self.pat_user(token))
            .ok_or_else(unauthorized)?;
        let allowed =
            self.read(|m| m.user(user_id).and_then(|u| u.permissions.as_ref()).is_some_and(|p| p.allows(access)));
        if allowed { Ok(user_id) } else { Err(Box::new((StatusCode::FORBIDDEN, "forbidden\n").into_response())) }
    }
}

async fn ping() -> &'static str {
    "pong"
}

async fn metrics_route<M: MetadataRead + Send + 'static>(
    State(state): State<Arc<HttpState<M>>>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = state.authorize(&headers, Access::ReadServers) {
        return *response;
    }
    let body = state.read(|m| metrics::render(m, &state.shared));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

async fn stats_route<M: MetadataRead + Send + 'static>(
    State(state): State<Arc<HttpState<M>>>,
    headers: HeaderMap,
) -> Response {
    if let Err(response) = state.authorize(&headers, Access::ReadServers) {
        return *response;
    }
    axum::Json(state.read(|m| metrics::stats(m, &state.shared))).into_response()
}

/// Binds the HTTP listener; a taken port fails with a message naming the transport.
pub fn bind(address: &str) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)
        .map_err(|error| std::io::Error::new(error.kind(), format!("http transport cannot bind {address}: {error}")))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `listener` on a new thread. `reader` makes that thread's metadata reader.
pub fn spawn<M, F>(
    listener: std::net::TcpListener,
    shared: Arc<Shared>,
    settings: HttpSettings,
    reader: F,
) -> std::io::Result<()>
where
    M: MetadataRead + Send + 'static,
    F: FnOnce() -> M + Send + 'static,
{
    let secret = jwt::load_secret(&settings.jwt_secret, &shared.config.data_path)?;
    let jwt = jwt::Jwt::new(&secret, settings.access_token_lifetime_s, settings.clock_skew_s)
        .map_err(std::io::Error::other)?;
    std::thread::Builder::new().name("rill-http".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_io().build() {
            Ok(runtime) => runtime,
            Err(error) => return tracing::error!(%error, "cannot start the http runtime"),
        };
        runtime.block_on(async move {
            let state = Arc::new(HttpState { shared, metadata: Mutex::new(reader()), jwt });
            let app = Router::new()
                .route("/ping", get(ping))
                .route("/users/login", post(auth::login::<M>))
                .route("/users/refresh-token", post(auth::refresh::<M>))
                .route("/users/logout", delete(auth::logout::<M>))
                .route("/personal-access-tokens/login", post(auth::login_with_token::<M>))
                .route("/metrics", get(metrics_route::<M>))
                .route("/stats", get(stats_route::<M>))
                .with_state(state);
            match tokio::net::TcpListener::from_std(listener) {
                Ok(listener) => {
                    if let Err(error) = axum::serve(listener, app).await {
                        tracing::error!(%error, "http transport stopped");
                    }
                }
                Err(error) => tracing::error!(%error, "cannot serve http"),
            }
        });
    })?;
    Ok(())
}
