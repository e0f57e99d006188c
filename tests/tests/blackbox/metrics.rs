//! The HTTP transport's `/metrics` (Prometheus text) and `/stats`: authentication by bearer
//! personal access token, counters that move with traffic (the memory pool's included),
//! consumer lag, per-partition rates, connections and errors, and the configurable path.

use std::io::{Read, Write};
use std::net::TcpStream;

use iggy::prelude::*;
use rill_tests::http::{get, metric as sample};
use rill_tests::{TestServer, connect_root, free_port, id, sample_message, topic_options};

fn with_http() -> anyhow::Result<(TestServer, String)> {
    with_http_and(&[])
}

/// A server with HTTP on a free port and `extra` settings; the HTTP address.
fn with_http_and(extra: &[(&str, &str)]) -> anyhow::Result<(TestServer, String)> {
    let address = format!("127.0.0.1:{}", free_port());
    let mut env = vec![("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", address.as_str())];
    env.extend_from_slice(extra);
    let server = TestServer::start_with_env(&env)?;
    Ok((server, address))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_need_a_token_with_read_servers_and_move_with_traffic() -> anyhow::Result<()> {
    let (server, http) = with_http()?;
    assert_eq!(get(&http, "/ping", None)?, (200, "pong".to_owned()));
    assert_eq!(get(&http, "/metrics", None)?.0, 401);
    assert_eq!(get(&http, "/metrics", Some("not-a-token"))?.0, 401);

    let root = connect_root(&server.tcp_address()).await?;
    let token = root.create_personal_access_token("metrics", IggyExpiry::NeverExpire).await?.token;
    let (status, before) = get(&http, "/metrics", Some(&token))?;
    assert_eq!(status, 200, "{before}");
    assert_eq!(sample(&before, "rill_messages"), Some(0));
    assert!(sample(&before, "rill_memory_pool_allocated_bytes").is_some(), "{before}");

    root.create_stream("s").await?;
    root.create_topic(&id(0), "t", &topic_options(1)).await?;
    let mut batch: Vec<IggyMessage> = (0..1000).map(sample_message).collect();
    root.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    let (_, after) = get(&http, "/metrics", Some(&token))?;
    assert_eq!(sample(&after, "rill_messages"), Some(1000), "{after}");
    assert_eq!(sample(&after, "rill_partition_messages{stream=\"0\",topic=\"0\",partition=\"0\"}"), Some(1000));
    assert!(sample(&after, "rill_memory_pool_allocated_bytes").unwrap_or(0) > 0, "the pool served the send: {after}");
    assert_eq!(sample(&after, "rill_streams"), Some(1));
    assert_eq!(sample(&after, "rill_unopened_partitions"), Some(0), "the one partition is open");

    let (status, stats) = get(&http, "/stats", Some(&token))?;
    assert_eq!(status, 200);
    let stats: serde_json::Value = serde_json::from_str(&stats)?;
    assert_eq!(stats["messages_count"], 1000);
    assert!(stats["memory_pool_misses"].is_u64());

    root.create_user("reader", "secret-1", UserStatus::Active, None).await?;
    let reader = rill_tests::connect_user(&server.tcp_address(), "reader", "secret-1").await?;
    let weak = reader.create_personal_access_token("weak", IggyExpiry::NeverExpire).await?.token;
    assert_eq!(get(&http, "/metrics", Some(&weak))?.0, 403, "no read_servers");
    Ok(())
}

/// One HTTP/1.1 request with a JSON body; returns (status, body).
fn send_json(
    address: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: &str,
) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Content-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).unwrap_or("0").parse()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}

fn access_token(body: &str) -> anyhow::Result<String> {
    let identity: serde_json::Value = serde_json::from_str(body)?;
    Ok(identity["access_token"]["token"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_login_refresh_logout_and_forgeries() -> anyhow::Result<()> {
    let (mut server, http) = with_http()?;
    let (status, body) = send_json(&http, "POST", "/users/login", None, r#"{"username":"iggy","password":"wrong"}"#)?;
    // As with Iggy: 400 with the code in the body, which the SDK passes on (a 401 would
    // reach the caller as a bare "unauthenticated").
    assert_eq!(status, 400);
    assert_eq!(serde_json::from_str::<serde_json::Value>(&body)?["id"], 42, "invalid credentials: {body}");
    assert_eq!(
        send_json(&http, "POST", "/users/login", None, "{not json")?.0 / 100,
        4,
        "malformed JSON is a client error"
    );
    let (status, body) = send_json(&http, "POST", "/users/login", None, r#"{"username":"iggy","password":"iggy"}"#)?;
    assert_eq!(status, 200, "{body}");
    let token = access_token(&body)?;
    assert_eq!(get(&http, "/metrics", Some(&token))?.0, 200);

    // A flipped signature character, and the same claims under `alg: none`.
    let mut forged = token.clone();
    let last = forged.pop().unwrap_or('A');
    forged.push(if last == 'A' { 'B' } else { 'A' });
    assert_eq!(get(&http, "/metrics", Some(&forged))?.0, 401);
    let claims = token.split('.').nth(1).unwrap_or_default();
    let unsigned = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{claims}.");
    assert_eq!(get(&http, "/metrics", Some(&unsigned))?.0, 401);

    let (status, body) = send_json(&http, "POST", "/users/refresh-token", None, &format!(r#"{{"token":"{token}"}}"#))?;
    assert_eq!(status, 200, "{body}");
    let refreshed = access_token(&body)?;
    assert_eq!(get(&http, "/metrics", Some(&token))?.0, 401, "a refreshed token is retired");
    assert_eq!(get(&http, "/metrics", Some(&refreshed))?.0, 200);

    // Tokens survive a restart: the signing secret is kept in the data directory.
    server.restart()?;
    assert_eq!(get(&http, "/metrics", Some(&refreshed))?.0, 200);
    assert_eq!(send_json(&http, "DELETE", "/users/logout", Some(&refreshed), "")?.0, 204);
    assert_eq!(get(&http, "/metrics", Some(&refreshed))?.0, 401, "logged out");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_jwts_are_refused() -> anyhow::Result<()> {
    let (_server, address) =
        with_http_and(&[("IGGY_HTTP_JWT_ACCESS_TOKEN_EXPIRY", "1 s"), ("IGGY_HTTP_JWT_CLOCK_SKEW", "1 s")])?;
    let (_, body) = send_json(&address, "POST", "/users/login", None, r#"{"username":"iggy","password":"iggy"}"#)?;
    let token = access_token(&body)?;
    assert_eq!(get(&address, "/metrics", Some(&token))?.0, 200);
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(get(&address, "/metrics", Some(&token))?.0, 401, "expired");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_lag_rates_connections_and_errors_follow_the_traffic_at_the_configured_path() -> anyhow::Result<()> {
    let (server, address) = with_http_and(&[("IGGY_HTTP_METRICS_ENDPOINT", "/prometheus")])?;
    let root = connect_root(&server.tcp_address()).await?;
    let token = root.create_personal_access_token("lag", IggyExpiry::NeverExpire).await?.token;
    assert_eq!(get(&address, "/metrics", Some(&token))?.0, 404, "the endpoint moved");
    root.create_stream("s").await?;
    root.create_topic(&id(0), "t", &topic_options(1)).await?;
    let mut batch: Vec<IggyMessage> = (0..100).map(sample_message).collect();
    root.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    let consumer = Consumer::new(id(7));
    let strategy = PollingStrategy::offset(0);
    let polled = root.poll_messages(&id(0), &id(0), Some(0), &consumer, &strategy, 40, false).await?;
    assert_eq!(polled.messages.len(), 40);
    root.store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 39).await?;
    root.flush_unsaved_buffer(&id(0), &id(0), 0, true).await?;
    // One refused request: a stream that does not exist.
    assert!(root.delete_stream(&id(99)).await.is_err());

    let (status, text) = get(&address, "/prometheus", Some(&token))?;
    assert_eq!(status, 200, "{text}");
    let partition = "stream=\"0\",topic=\"0\",partition=\"0\"";
    let lag = format!("rill_consumer_lag{{{partition},kind=\"consumer\",consumer=\"7\"}}");
    assert_eq!(sample(&text, &lag), Some(60), "newest offset 99, stored 39:\n{text}");
    let offset = format!("rill_consumer_offset{{{partition},kind=\"consumer\",consumer=\"7\"}}");
    assert_eq!(sample(&text, &offset), Some(39));
    assert_eq!(sample(&text, &format!("rill_partition_appended_messages_total{{{partition}}}")), Some(100));
    assert_eq!(sample(&text, &format!("rill_partition_polled_messages_total{{{partition}}}")), Some(40));
    assert!(sample(&text, &format!("rill_partition_appended_bytes_total{{{partition}}}")).unwrap_or(0) > 0);
    assert!(sample(&text, &format!("rill_partition_polled_bytes_total{{{partition}}}")).unwrap_or(0) > 0);
    assert_eq!(sample(&text, &format!("rill_partition_current_offset{{{partition}}}")), Some(99));
    assert_eq!(sample(&text, &format!("rill_partition_segments{{{partition}}}")), Some(1));
    assert!(sample(&text, "rill_connections{transport=\"tcp\"}").unwrap_or(0) >= 1, "{text}");
    assert!(text.contains("rill_request_errors_total{code="), "the refused request is counted:\n{text}");
    assert!(sample(&text, "rill_disk_available_bytes").unwrap_or(0) > 0);
    // Iggy's own names for the counts.
    assert_eq!(sample(&text, "streams"), Some(1));
    assert_eq!(sample(&text, "messages"), Some(100));
    assert_eq!(sample(&text, "users"), Some(1));
    assert!(sample(&text, "rill_fsync_duration_seconds_count").unwrap_or(0) >= 1, "the flush's fsync:\n{text}");

    // Caught up: the lag goes to zero.
    root.store_consumer_offset(&consumer, &id(0), &id(0), Some(0), 99).await?;
    let (_, text) = get(&address, "/prometheus", Some(&token))?;
    assert_eq!(sample(&text, &lag), Some(0), "{text}");
    assert!(sample(&text, "http_requests_total").unwrap_or(0) >= 1, "the first scrape is counted:\n{text}");
    Ok(())
}

/// `rill_*` metric names an expression uses (a histogram's `_bucket` series counts as its
/// own name, as the server writes it).
fn metric_names(expr: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("rill_") {
        let name: String = rest[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        rest = &rest[at + name.len()..];
        names.push(name);
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_uses_only_metrics_the_server_writes() -> anyhow::Result<()> {
    let path = rill_tests::workspace_dir().join("packaging/grafana/rill-dashboard.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(path)?)?;
    let (server, http) = with_http()?;
    let root = connect_root(&server.tcp_address()).await?;
    let token = root.create_personal_access_token("grafana", IggyExpiry::NeverExpire).await?.token;
    // Enough traffic for every series to exist: a send, a poll, a stored offset, an error.
    root.create_stream("s").await?;
    root.create_topic(&id(0), "t", &topic_options(1)).await?;
    let mut batch: Vec<IggyMessage> = (0..10).map(sample_message).collect();
    root.send_messages(&id(0), &id(0), &Partitioning::partition_id(0), &mut batch).await?;
    let consumer = Consumer::new(id(1));
    root.poll_messages(&id(0), &id(0), Some(0), &consumer, &PollingStrategy::offset(0), 5, true).await?;
    assert!(root.delete_stream(&id(99)).await.is_err());
    let (_, text) = get(&http, "/metrics", Some(&token))?;
    let written: Vec<&str> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.is_empty())
        .filter_map(|line| line.split(['{', ' ']).next())
        .collect();
    let panels = dashboard["panels"].as_array().expect("panels");
    assert!(panels.len() >= 10, "a dashboard of the metrics people watch");
    let mut checked = 0;
    for panel in panels {
        for target in panel["targets"].as_array().expect("targets") {
            let expr = target["expr"].as_str().expect("an expression");
            for name in metric_names(expr) {
                assert!(written.contains(&name.as_str()), "panel {} uses {name}, which /metrics lacks", panel["title"]);
                checked += 1;
            }
        }
    }
    assert!(checked >= 20, "{checked} metric references checked");
    Ok(())
}
