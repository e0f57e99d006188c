//! The listener loop (plain HTTP/1.1 through axum, or TLS through rustls then hyper) and
//! the CORS layer built from the `[http.cors]` settings.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderName, HeaderValue, Method};
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio_rustls::TlsAcceptor;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};

/// The server side of TLS: rustls settings with the certificate already loaded.
pub type TlsConfig = Arc<tokio_rustls::rustls::ServerConfig>;

/// A client that opens a TLS connection and stalls loses it after this long.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// `[http.cors]`: which browser origins may call the API, and with what.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CorsSettings {
    pub enabled: bool,
    /// `*` allows any origin.
    pub allowed_origins: Vec<String>,
    pub allowed_methods: Vec<String>,
    pub allowed_headers: Vec<String>,
    pub exposed_headers: Vec<String>,
    pub allow_credentials: bool,
}

/// Refuses settings the CORS rules forbid (credentials with a wildcard) or cannot parse,
/// so a bad config stops the start with a message instead of failing later.
pub fn check_cors(settings: &CorsSettings) -> Result<(), String> {
    if !settings.enabled {
        return Ok(());
    }
    let wildcard = |list: &[String]| list.iter().any(|value| value == "*");
    if settings.allow_credentials
        && (wildcard(&settings.allowed_origins)
            || wildcard(&settings.allowed_methods)
            || wildcard(&settings.allowed_headers)
            || wildcard(&settings.exposed_headers))
    {
        return Err("http.cors: allow_credentials cannot be combined with a `*` entry".into());
    }
    for origin in settings.allowed_origins.iter().filter(|o| *o != "*") {
        HeaderValue::from_str(origin).map_err(|_| format!("http.cors: invalid origin `{origin}`"))?;
    }
    for method in settings.allowed_methods.iter().filter(|m| *m != "*") {
        Method::from_bytes(method.as_bytes()).map_err(|_| format!("http.cors: invalid method `{method}`"))?;
    }
    for name in settings.allowed_headers.iter().chain(&settings.exposed_headers).filter(|h| *h != "*" && !h.is_empty())
    {
        HeaderName::from_bytes(name.as_bytes()).map_err(|_| format!("http.cors: invalid header `{name}`"))?;
    }
    Ok(())
}

/// The CORS layer, or `None` when CORS is off. Expects `check_cors` to have passed.
pub fn cors_layer(settings: &CorsSettings) -> Option<CorsLayer> {
    if !settings.enabled {
        return None;
    }
    let any = |list: &[String]| list.iter().any(|value| value == "*");
    let mut layer = CorsLayer::new().allow_credentials(settings.allow_credentials);
    layer = if any(&settings.allowed_origins) {
        layer.allow_origin(Any)
    } else {
        let origins: Vec<HeaderValue> =
            settings.allowed_origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()).collect();
        layer.allow_origin(AllowOrigin::list(origins))
    };
    layer = if any(&settings.allowed_methods) {
        layer.allow_methods(Any)
    } else {
        layer.allow_methods(
            settings.allowed_methods.iter().filter_map(|m| Method::from_bytes(m.as_bytes()).ok()).collect::<Vec<_>>(),
        )
    };
    let headers = |list: &[String]| -> Vec<HeaderName> {
        list.iter().filter_map(|h| HeaderName::from_bytes(h.as_bytes()).ok()).collect()
    };
    layer = if any(&settings.allowed_headers) {
        layer.allow_headers(Any)
    } else {
        layer.allow_headers(headers(&settings.allowed_headers))
    };
    // The SDK reads `iggy-durability` from send replies; a browser can only see it exposed.
    let mut exposed = headers(&settings.exposed_headers);
    exposed.push(HeaderName::from_static("iggy-durability"));
    Some(layer.expose_headers(exposed))
}

/// Serves until the listener fails.
pub async fn run(listener: std::net::TcpListener, app: Router, tls: Option<TlsConfig>) -> std::io::Result<()> {
    let listener = tokio::net::TcpListener::from_std(listener)?;
    let Some(tls) = tls else {
        return axum::serve(listener, app).await;
    };
    let acceptor = TlsAcceptor::from(tls);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            // A failed accept (a connection reset before it was taken, descriptor limits)
            // must not end the listener.
            Err(error) => {
                tracing::warn!(%error, "http accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let (acceptor, app) = (acceptor.clone(), app.clone());
        tokio::spawn(async move {
            let Ok(Ok(stream)) = tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await else {
                return;
            };
            let service = TowerToHyperService::new(app);
            let connection = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service);
            if let Err(error) = connection.await {
                tracing::debug!(%error, "https connection ended");
            }
        });
    }
}
