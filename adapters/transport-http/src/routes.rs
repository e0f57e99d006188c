//! The HTTP server: the route table, the `/metrics` and `/ping` routes, request latency,
//! and the thread the server runs on.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, post, put};
use rill_application::GatewayContext;
use rill_application::ports::{Gateway, MetadataRead};

use crate::serve::TlsConfig;
use crate::state::{HttpSettings, HttpState, ReadMetadata};
use crate::{api, auth, console, jwt, messages, metrics, resources, serve, system, users};

async fn ping() -> &'static str {
    "pong"
}

/// `/metrics` for a user with read_servers: Prometheus text.
async fn metrics_route(State(state): State<Arc<HttpState>>, headers: HeaderMap) -> Response {
    let user_id = match state.authenticate(&headers) {
        Ok(user_id) => user_id,
        Err(error) => return error.into_response(),
    };
    let allowed = state.read(|m| m.user_allows(user_id, rill_domain::permissions::Access::ReadServers));
    if !allowed {
        return api::ApiError::Code(rill_domain::error::ErrorCode::Unauthorized).into_response();
    }
    let body = state.read(|m| metrics::render(m, &state.context));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], body).into_response()
}

/// Records each request's latency under its matched route (never the raw path).
async fn record_latency(State(state): State<Arc<HttpState>>, request: Request, next: Next) -> Response {
    let route = request.extensions().get::<MatchedPath>().map(|path| format!("{} {}", request.method(), path.as_str()));
    let started = Instant::now();
    let response = next.run(request).await;
    if let Some(route) = route {
        state.context.telemetry().latency.record_http(&route, started.elapsed().as_micros() as u64);
    }
    response
}

fn resource_routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/streams", get(resources::get_streams).post(resources::create_stream))
        .route(
            "/streams/{stream}",
            get(resources::get_stream).put(resources::update_stream).delete(resources::delete_stream),
        )
        .route("/streams/{stream}/purge", delete(resources::purge_stream))
        .route("/streams/{stream}/topics", get(resources::get_topics).post(resources::create_topic))
        .route(
            "/streams/{stream}/topics/{topic}",
            get(resources::get_topic).put(resources::update_topic).delete(resources::delete_topic),
        )
        .route("/streams/{stream}/topics/{topic}/purge", delete(resources::purge_topic))
        .route(
            "/streams/{stream}/topics/{topic}/partitions",
            post(resources::create_partitions).delete(resources::delete_partitions),
        )
        .route("/streams/{stream}/topics/{topic}/partitions/{partition}", delete(resources::delete_segments))
        .route(
            "/streams/{stream}/topics/{topic}/consumer-groups",
            get(resources::get_groups).post(resources::create_group),
        )
        .route(
            "/streams/{stream}/topics/{topic}/consumer-groups/{group}",
            get(resources::get_group).delete(resources::delete_group),
        )
        .route("/streams/{stream}/topics/{topic}/messages", get(messages::poll).post(messages::send))
        .route("/streams/{stream}/topics/{topic}/messages/flush/{partition}/{fsync}", get(messages::flush))
        .route(
            "/streams/{stream}/topics/{topic}/consumer-offsets",
            get(messages::get_offset).put(messages::store_offset),
        )
        .route("/streams/{stream}/topics/{topic}/consumer-offsets/{consumer}", delete(messages::delete_offset))
        .route("/streams/{stream}/topics/{topic}/stored-offsets", get(console::stored_offsets))
}

fn account_routes() -> Router<Arc<HttpState>> {
    Router::new()
        .route("/users", get(users::get_users).post(users::create_user))
        .route("/users/login", post(auth::login))
        .route("/users/refresh-token", post(auth::refresh))
        .route("/users/logout", delete(auth::logout))
        .route("/users/{user}", get(users::get_user).put(users::update_user).delete(users::delete_user))
        .route("/users/{user}/password", put(users::change_password))
        .route("/users/{user}/permissions", put(users::update_permissions))
        .route("/personal-access-tokens", get(users::get_tokens).post(users::create_token))
        .route("/personal-access-tokens/login", post(auth::login_with_token))
        .route("/personal-access-tokens/{name}", delete(users::delete_token))
}

/// The first segments of every API route: `[http.metrics] endpoint` may not take one.
pub const ROUTE_PREFIXES: &[&str] = &[
    "/ping",
    "/stats",
    "/clients",
    "/cluster",
    "/options",
    "/snapshot",
    "/streams",
    "/users",
    "/personal-access-tokens",
    "/ui",
];

/// The whole route table, with latency recording, the body cap and CORS.
fn router(state: Arc<HttpState>, settings: &HttpSettings) -> Router {
    let mut app = Router::new().route("/ping", get(ping));
    if let Some(endpoint) = &settings.metrics_endpoint {
        app = app.route(endpoint, get(metrics_route));
    }
    if settings.web_ui {
        app = app.merge(console::routes());
    }
    let app = app
        .route("/stats", get(system::stats))
        .route("/clients", get(system::clients))
        .route("/clients/{client}", get(system::client))
        .route("/cluster/metadata", get(system::cluster))
        .route("/options/{scope}", get(system::options))
        .route("/snapshot", post(system::snapshot))
        .merge(resource_routes())
        .merge(account_routes())
        .route_layer(axum::middleware::from_fn_with_state(state.clone(), record_latency))
        .layer(axum::extract::DefaultBodyLimit::max(settings.max_request_size_bytes))
        .with_state(state);
    match serve::cors_layer(&settings.cors) {
        Some(cors) => app.layer(cors),
        None => app,
    }
}

/// Binds the HTTP listener; a taken port fails with a message naming the transport.
pub fn bind(address: &str) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(address)
        .map_err(|error| std::io::Error::new(error.kind(), format!("http transport cannot bind {address}: {error}")))?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Serves `listener` on a new thread, over TLS when `tls` is given. `reader` makes that
/// thread's metadata reader; `gateway` runs requests on the shards.
pub fn spawn<M, F>(
    listener: std::net::TcpListener,
    context: GatewayContext,
    settings: HttpSettings,
    tls: Option<TlsConfig>,
    gateway: Arc<dyn Gateway>,
    reader: F,
) -> std::io::Result<()>
where
    M: MetadataRead + Send + 'static,
    F: FnOnce() -> M + Send + 'static,
{
    serve::check_cors(&settings.cors).map_err(std::io::Error::other)?;
    let secret = jwt::load_secret(&settings.jwt_secret, context.data_path())?;
    let jwt = jwt::Jwt::new(&secret, settings.access_token_lifetime_s, settings.clock_skew_s)
        .map_err(std::io::Error::other)?;
    std::thread::Builder::new().name("rill-http".into()).spawn(move || {
        let runtime = match tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build() {
            Ok(runtime) => runtime,
            Err(error) => return tracing::error!(%error, "cannot start the http runtime"),
        };
        runtime.block_on(async move {
            let metadata: Mutex<Box<dyn ReadMetadata>> = Mutex::new(Box::new(reader()));
            let state = Arc::new(HttpState { context, metadata, jwt, gateway });
            let app = router(state, &settings);
            if let Err(error) = serve::run(listener, app, tls).await {
                tracing::error!(%error, "http transport stopped");
            }
        });
    })?;
    Ok(())
}
