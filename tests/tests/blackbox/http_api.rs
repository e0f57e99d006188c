//! The HTTP transport beyond the SDK's happy path: CORS preflights and headers, HTTPS with
//! the self-signed certificate, request-latency histograms in `/metrics` (and the whole
//! exposition parsing as Prometheus text), the request size cap, and malformed bodies.

use iggy::prelude::*;
use rill_tests::{TestServer, free_port};
use serde_json::{Value, json};

struct Http {
    _server: TestServer,
    base: String,
    client: reqwest::Client,
    token: String,
}

async fn login(client: &reqwest::Client, base: &str) -> anyhow::Result<String> {
    let identity: Value = client
        .post(format!("{base}/users/login"))
        .json(&json!({ "username": "iggy", "password": "iggy" }))
        .send()
        .await?
        .json()
        .await?;
    Ok(identity["access_token"]["token"].as_str().unwrap_or_default().to_owned())
}

async fn start(extra: &[(&str, &str)]) -> anyhow::Result<Http> {
    let address = format!("127.0.0.1:{}", free_port());
    let mut env = vec![("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", address.as_str())];
    env.extend_from_slice(extra);
    let server = TestServer::start_with_env(&env)?;
    let base = format!("http://{address}");
    let client = reqwest::Client::new();
    let token = login(&client, &base).await?;
    Ok(Http { _server: server, base, client, token })
}

/// Checks every line of a Prometheus text exposition: comments are HELP or TYPE, samples
/// are `name{labels} value` with a numeric value.
fn assert_prometheus_text(text: &str) {
    for line in text.lines().filter(|line| !line.is_empty()) {
        if let Some(comment) = line.strip_prefix("# ") {
            assert!(comment.starts_with("HELP ") || comment.starts_with("TYPE "), "comment: {line}");
            continue;
        }
        let (key, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("no value: {line}"));
        assert!(value == "+Inf" || value.parse::<f64>().is_ok(), "value of {line}");
        let name = key.split('{').next().unwrap_or_default();
        assert!(!name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "metric name: {line}");
        if let Some(labels) = key.strip_prefix(name) {
            assert!(labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')), "labels: {line}");
        }
    }
}

fn sample(text: &str, key: &str) -> Option<f64> {
    text.lines().find_map(|line| line.strip_prefix(key)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cors_preflight_and_responses_carry_the_configured_headers() -> anyhow::Result<()> {
    let http = start(&[("IGGY_HTTP_CORS_ALLOWED_ORIGINS", "https://console.example")]).await?;
    let preflight = http
        .client
        .request(reqwest::Method::OPTIONS, format!("{}/streams", http.base))
        .header("Origin", "https://console.example")
        .header("Access-Control-Request-Method", "POST")
        .header("Access-Control-Request-Headers", "authorization,content-type")
        .send()
        .await?;
    assert!(preflight.status().is_success(), "preflight: {}", preflight.status());
    let headers = preflight.headers();
    assert_eq!(headers["access-control-allow-origin"], "https://console.example");
    let methods = headers["access-control-allow-methods"].to_str()?;
    assert!(methods.contains("POST") && methods.contains("DELETE"), "methods: {methods}");
    assert!(headers["access-control-allow-headers"].to_str()?.contains("authorization"));

    let response = http
        .client
        .get(format!("{}/streams", http.base))
        .header("Origin", "https://console.example")
        .bearer_auth(&http.token)
        .send()
        .await?;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["access-control-allow-origin"], "https://console.example");
    assert!(response.headers()["access-control-expose-headers"].to_str()?.contains("iggy-durability"));

    let stranger =
        http.client.get(format!("{}/ping", http.base)).header("Origin", "https://elsewhere.example").send().await?;
    assert!(stranger.headers().get("access-control-allow-origin").is_none(), "an unlisted origin gets no grant");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_serves_the_api_with_the_self_signed_certificate() -> anyhow::Result<()> {
    let address = format!("127.0.0.1:{}", free_port());
    let server = TestServer::start_with_env(&[
        ("IGGY_HTTP_ENABLED", "true"),
        ("IGGY_HTTP_ADDRESS", address.as_str()),
        ("IGGY_HTTP_TLS_ENABLED", "true"),
    ])?;
    let pem = std::fs::read(server.data_dir().join("runtime/certs/self_signed_cert.pem"))?;
    let client = reqwest::Client::builder().add_root_certificate(reqwest::Certificate::from_pem(&pem)?).build()?;
    let port = address.rsplit(':').next().unwrap_or_default();
    let base = format!("https://localhost:{port}");
    assert_eq!(client.get(format!("{base}/ping")).send().await?.text().await?, "pong");
    let token = login(&client, &base).await?;
    let created =
        client.post(format!("{base}/streams")).bearer_auth(&token).json(&json!({"name": "tls"})).send().await?;
    assert_eq!(created.status(), 201);
    // Plain HTTP to the TLS port is not served.
    let plain = reqwest::Client::new().get(format!("http://{address}/ping")).send().await;
    assert!(plain.is_err() || !plain.as_ref().is_ok_and(|r| r.status().is_success()), "plaintext: {plain:?}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_parse_as_prometheus_text_and_latency_histograms_move() -> anyhow::Result<()> {
    let http = start(&[]).await?;
    let binary = rill_tests::connect_root(&http._server.tcp_address()).await?;
    binary.create_stream("latency").await?;
    for _ in 0..3 {
        binary.get_streams().await?;
    }
    http.client.get(format!("{}/streams", http.base)).bearer_auth(&http.token).send().await?;
    let metrics = |http: &Http| {
        let request = http.client.get(format!("{}/metrics", http.base)).bearer_auth(&http.token);
        async move { request.send().await?.text().await }
    };
    let text = metrics(&http).await?;
    assert_prometheus_text(&text);
    let streams_count = r#"rill_request_duration_seconds_count{transport="binary",request="get_streams"}"#;
    assert_eq!(sample(&text, streams_count), Some(3.0), "{text}");
    let created = r#"rill_request_duration_seconds_count{transport="binary",request="create_stream"}"#;
    assert_eq!(sample(&text, created), Some(1.0));
    let route = r#"rill_request_duration_seconds_count{transport="http",request="GET /streams"}"#;
    assert_eq!(sample(&text, route), Some(1.0), "the HTTP route is recorded by its pattern");
    let inf = r#"rill_request_duration_seconds_bucket{transport="binary",request="get_streams",le="+Inf"}"#;
    assert_eq!(sample(&text, inf), Some(3.0));

    binary.get_streams().await?;
    let again = metrics(&http).await?;
    assert_eq!(sample(&again, streams_count), Some(4.0), "the counter moves");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_and_oversized_requests_are_refused_and_the_server_keeps_serving() -> anyhow::Result<()> {
    let http = start(&[("IGGY_HTTP_MAX_REQUEST_SIZE", "64 KB")]).await?;
    let post = |path: &str, body: String| {
        let request = http
            .client
            .post(format!("{}{path}", http.base))
            .bearer_auth(&http.token)
            .header("content-type", "application/json")
            .body(body);
        async move { request.send().await }
    };
    for (path, body) in [
        ("/streams", "{not json".to_owned()),
        ("/streams", r#"{"name": 5}"#.to_owned()),
        ("/streams", json!({ "name": "n".repeat(300) }).to_string()),
        ("/streams/0/topics", r#"{"name":"t","partitions_count":"many"}"#.to_owned()),
        ("/users", r#"{"username":"ab","password":"x","status":"sleeping"}"#.to_owned()),
    ] {
        let response = post(path, body.clone()).await?;
        assert_eq!(response.status(), 400, "{path} {body}");
        let document: Value = response.json().await?;
        assert!(document["reason"].is_string(), "an error document: {document}");
    }
    let payload = "A".repeat(100_000);
    let big = json!({ "partitioning": {"kind": "balanced", "value": ""}, "messages": [{"id": 1, "payload": payload}] });
    let response = post("/streams/0/topics/0/messages", big.to_string()).await?;
    assert_eq!(response.status(), 413, "over the request size cap");
    let bad_header = json!({
        "partitioning": {"kind": "balanced", "value": ""},
        "messages": [{"id": 1, "payload": "aGk=", "user_headers": [{"key": {"kind": "nope", "value": "aw=="}, "value": {"kind": "string", "value": "dg=="}}]}],
    });
    let response = post("/streams/0/topics/0/messages", bad_header.to_string()).await?;
    assert_eq!(response.status(), 400, "unknown header kind");

    // Still serving, and nothing was created by the refused requests.
    let streams: Value =
        http.client.get(format!("{}/streams", http.base)).bearer_auth(&http.token).send().await?.json().await?;
    assert_eq!(streams, json!([]));

    // A send with one payload that is not base64 stores none of its messages.
    assert_eq!(post("/streams", json!({ "name": "s" }).to_string()).await?.status(), 201);
    let topic = json!({ "name": "t", "partitions_count": 1, "compression_algorithm": "none", "message_expiry": 0, "max_topic_size": 0 });
    assert_eq!(post("/streams/s/topics", topic.to_string()).await?.status(), 201);
    let messages = |payloads: &[&str]| {
        let messages: Vec<Value> =
            payloads.iter().enumerate().map(|(i, p)| json!({ "id": i + 1, "payload": p })).collect();
        json!({ "partitioning": {"kind": "partition_id", "value": "AAAAAA=="}, "messages": messages }).to_string()
    };
    let response = post("/streams/s/topics/t/messages", messages(&["aGk=", "not base64!"])).await?;
    assert_eq!(response.status(), 400, "a payload that is not base64");
    let response = post("/streams/s/topics/t/messages", messages(&["aGk=", "d29ybGQ="])).await?;
    assert!(response.status().is_success(), "{}", response.status());
    let polled: Value = http
        .client
        .get(format!(
            "{}/streams/s/topics/t/messages?consumer_id=1&partition_id=0&kind=offset&value=0&count=10",
            http.base
        ))
        .bearer_auth(&http.token)
        .send()
        .await?
        .json()
        .await?;
    let payloads: Vec<&str> =
        polled["messages"].as_array().unwrap().iter().map(|m| m["payload"].as_str().unwrap()).collect();
    assert_eq!(payloads, ["aGk=", "d29ybGQ="], "only the good send, decoded and encoded back: {polled}");
    assert_eq!(polled["count"], 2);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_tokens_and_groups_through_the_sdk_http_client() -> anyhow::Result<()> {
    let http = start(&[]).await?;
    let client = HttpClient::create(std::sync::Arc::new(HttpClientConfig {
        api_url: http.base.clone(),
        retries: 0,
        ..HttpClientConfig::default()
    }))?;
    client.login_user("iggy", "iggy").await?;
    let created = client.create_user("rita", "rita-pass", UserStatus::Active, Some(Permissions::default())).await?;
    assert_eq!(created.username, "rita");
    assert!(created.permissions.is_some(), "permissions come back");
    client.update_user(&Identifier::named("rita")?, Some("rhea"), None, &UserUpdateOptions::default()).await?;
    let user = client.get_user(&Identifier::named("rhea")?).await?.expect("renamed user");
    assert_eq!(user.status, UserStatus::Active);
    client.change_password(&Identifier::named("rhea")?, "rita-pass", "rhea-pass").await?;

    let token = client.create_personal_access_token("ci-token", IggyExpiry::NeverExpire).await?;
    let tokens = client.get_personal_access_tokens().await?;
    assert_eq!(tokens.len(), 1);
    assert_eq!(tokens[0].name, "ci-token");
    let by_token = HttpClient::create(std::sync::Arc::new(HttpClientConfig {
        api_url: http.base.clone(),
        retries: 0,
        ..HttpClientConfig::default()
    }))?;
    let identity = by_token.login_with_personal_access_token(&token.token).await?;
    assert_eq!(identity.user_id, 0);

    client.create_stream("g").await?;
    client.create_topic(&Identifier::numeric(0)?, "t", &rill_tests::topic_options(2)).await?;
    let topic = client.get_topic(&Identifier::numeric(0)?, &Identifier::numeric(0)?).await?;
    assert!(topic.is_some(), "topic created");
    let group = client.create_consumer_group(&Identifier::numeric(0)?, &Identifier::numeric(0)?, "workers").await?;
    assert_eq!((group.name.as_str(), group.members_count), ("workers", 0));
    let groups = client.get_consumer_groups(&Identifier::numeric(0)?, &Identifier::numeric(0)?).await?;
    assert_eq!(groups.len(), 1);
    client
        .delete_consumer_group(&Identifier::numeric(0)?, &Identifier::numeric(0)?, &Identifier::named("workers")?)
        .await?;
    assert!(client.get_consumer_groups(&Identifier::numeric(0)?, &Identifier::numeric(0)?).await?.is_empty());
    client.delete_personal_access_token("ci-token").await?;
    client.delete_user(&Identifier::named("rhea")?).await?;
    assert!(client.get_user(&Identifier::named("rhea")?).await?.is_none());
    Ok(())
}
