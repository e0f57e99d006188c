//! The HTTP transport's `/metrics` (Prometheus text) and `/stats`: authentication by bearer
//! personal access token, and counters that move with traffic, the memory pool's included.

use std::io::{Read, Write};
use std::net::TcpStream;

use iggy::prelude::*;
use rill_tests::http::{get, metric as sample};
use rill_tests::{TestServer, connect_root, free_port, id, sample_message, topic_options};

fn with_http() -> anyhow::Result<(TestServer, String)> {
    let address = format!("127.0.0.1:{}", free_port());
    let server = TestServer::start_with_env(&[("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", address.as_str())])?;
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
    let address = format!("127.0.0.1:{}", free_port());
    let _server = TestServer::start_with_env(&[
        ("IGGY_HTTP_ENABLED", "true"),
        ("IGGY_HTTP_ADDRESS", address.as_str()),
        ("IGGY_HTTP_JWT_ACCESS_TOKEN_EXPIRY", "1 s"),
        ("IGGY_HTTP_JWT_CLOCK_SKEW", "1 s"),
    ])?;
    let (_, body) = send_json(&address, "POST", "/users/login", None, r#"{"username":"iggy","password":"iggy"}"#)?;
    let token = access_token(&body)?;
    assert_eq!(get(&address, "/metrics", Some(&token))?.0, 200);
    std::thread::sleep(std::time::Duration::from_millis(3500));
    assert_eq!(get(&address, "/metrics", Some(&token))?.0, 401, "expired");
    Ok(())
}
