//! The web console end to end: the real rill-server binary, headless Chromium driving the
//! pages at `/ui`, and Iggy's official client producing and consuming beside it. Each test
//! saves a screenshot of the page when it fails (under target/console-screenshots/); the
//! happy paths also save the screenshots docs/console.md shows.

mod scale;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use iggy::prelude::*;
use rill_tests::browser::{Browser, screenshot_dir};
use rill_tests::{TestServer, connect_root, create_stream_and_topic, free_port, message, named};
use serde_json::json;

/// A server with HTTP on and a browser pointed at its console.
pub struct Console {
    pub server: TestServer,
    pub browser: Browser,
    pub origin: String,
    name: &'static str,
}

impl Console {
    pub async fn start(name: &'static str, extra_env: &[(&str, &str)]) -> anyhow::Result<Self> {
        let address = format!("127.0.0.1:{}", free_port());
        let mut env = vec![("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", address.as_str())];
        env.extend_from_slice(extra_env);
        let server = TestServer::start_with_env(&env)?;
        let browser = Browser::start().await?;
        Ok(Self { server, browser, origin: format!("http://{address}"), name })
    }

    /// Runs `scenario` on a fresh console, then `finish`es it.
    pub async fn run(
        name: &'static str,
        extra_env: &[(&str, &str)],
        scenario: impl AsyncFnOnce(&mut Console) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let mut console = Self::start(name, extra_env).await?;
        let result = scenario(&mut console).await;
        console.finish(result).await
    }

    /// Opens a console page by its route (`/streams`, ...).
    pub async fn open(&self, route: &str) -> anyhow::Result<()> {
        self.browser.open(&format!("{}/ui/#{route}", self.origin)).await
    }

    pub async fn login(&self, username: &str, password: &str) -> anyhow::Result<()> {
        self.open("/login").await?;
        self.submit_login(username, password).await?;
        self.browser.wait_text("#who-name", username).await
    }

    pub async fn submit_login(&self, username: &str, password: &str) -> anyhow::Result<()> {
        self.browser.fill("#login input[name=username]", username).await?;
        self.browser.fill("#login input[name=password]", password).await?;
        self.browser.click("#login button[type=submit]").await
    }

    pub async fn screenshot(&self, file: &str) -> anyhow::Result<()> {
        self.browser.screenshot(&screenshot_dir().join(file)).await
    }

    /// Ends the test: on failure, a screenshot named after it (and its path in the error).
    pub async fn finish(self, result: anyhow::Result<()>) -> anyhow::Result<()> {
        if let Err(error) = result {
            let path = screenshot_dir().join(format!("failed-{}.png", self.name));
            let saved = self.browser.screenshot(&path).await;
            self.browser.close().await;
            let shot =
                saved.map_or_else(|e| format!("no screenshot: {e}"), |()| format!("screenshot: {}", path.display()));
            return Err(error.context(shot));
        }
        self.browser.close().await;
        Ok(())
    }
}

/// The id of the stream or topic whose page the browser shows (from its address).
async fn id_in_hash(browser: &Browser, after: &str) -> anyhow::Result<u32> {
    let hash = browser.script("return location.hash;", json!([])).await?;
    let hash = hash.as_str().unwrap_or_default();
    let id = hash.split(after).nth(1).and_then(|rest| rest.split(['/', '?']).next()).unwrap_or_default();
    id.parse().map_err(|_| anyhow::anyhow!("no id after {after} in {hash}"))
}

#[tokio::test]
async fn the_console_is_served_from_the_binary_and_can_be_turned_off() -> anyhow::Result<()> {
    let on_address = format!("127.0.0.1:{}", free_port());
    let _on = TestServer::start_with_env(&[("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", &on_address)])?;
    let client = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()?;
    let bare = client.get(format!("http://{on_address}/ui")).send().await?;
    assert_eq!(bare.status().as_u16(), 308, "/ui redirects to /ui/");
    assert_eq!(bare.headers()["location"], "/ui/");
    let page = client.get(format!("http://{on_address}/ui/")).send().await?;
    assert_eq!(page.status().as_u16(), 200);
    assert!(page.headers()["content-security-policy"].to_str()?.contains("script-src 'self'"));
    assert!(page.text().await?.contains("./app.js"), "the shell loads the app");
    let script = client.get(format!("http://{on_address}/ui/app.js")).send().await?;
    assert!(script.headers()["content-type"].to_str()?.starts_with("text/javascript"));
    assert_eq!(client.get(format!("http://{on_address}/ui/../Cargo.toml")).send().await?.status().as_u16(), 404);

    let off_address = format!("127.0.0.1:{}", free_port());
    let env =
        [("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", off_address.as_str()), ("IGGY_HTTP_WEB_UI", "false")];
    let _off = TestServer::start_with_env(&env)?;
    assert_eq!(client.get(format!("http://{off_address}/ui/")).send().await?.status().as_u16(), 404, "web_ui = false");
    assert_eq!(client.get(format!("http://{off_address}/ping")).send().await?.status().as_u16(), 200, "the API stays");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_send_and_browse_as_text_json_and_hex() -> anyhow::Result<()> {
    Console::run("browse", &[], browse_scenario).await
}

async fn browse_scenario(console: &mut Console) -> anyhow::Result<()> {
    let browser = &console.browser;
    console.login("iggy", "iggy").await?;
    console.open("/streams").await?;
    // Bad input is named at its field, and nothing is created.
    browser.fill("#create-stream input[name=name]", &"x".repeat(300)).await?;
    browser.click("#create-stream button[type=submit]").await?;
    browser.wait_text("#create-stream .field-error[data-for=name]", "at most 255").await?;
    browser.fill("#create-stream input[name=name]", "orders-stream").await?;
    browser.click("#create-stream button[type=submit]").await?;
    browser.wait_text("#stream-title", "orders-stream").await?;
    browser.fill("#create-topic input[name=name]", "orders").await?;
    browser.fill("#create-topic input[name=partitions_count]", "2").await?;
    browser.click("#create-topic button[type=submit]").await?;
    browser.wait_text("#topic-title", "orders").await?;

    browser.fill("#send-message textarea[name=payload]", r#"{"order":1,"item":"tea"}"#).await?;
    browser.fill("#send-message textarea[name=headers]", "source=console").await?;
    browser.click("#send-message button[type=submit]").await?;
    browser.wait_text("#topic-message", "Message sent").await?;

    let client = connect_root(&console.server.tcp_address()).await?;
    let mut headers = BTreeMap::new();
    headers.insert(HeaderKey::from_str("origin")?, HeaderValue::from_str("sdk")?);
    let mut messages = vec![message(42, b"hello from the sdk".to_vec(), Some(headers))];
    let (stream, topic) = (named("orders-stream"), named("orders"));
    client.send_messages(&stream, &topic, &Partitioning::partition_id(0), &mut messages).await?;

    browser.click("#open-browser").await?;
    browser.wait_text("#message-list", r#"{"order":1,"item":"tea"}"#).await?;
    browser.wait_text("#message-list", "hello from the sdk").await?;
    browser.wait_text("#message-list", "source\nconsole").await?;
    browser.wait_text("#message-list", "origin\nsdk").await?;
    browser.wait_text("#page-status", "Offsets 0–1 of 2").await?;
    // From a time: an hour ago finds both; a time to come finds none.
    for (when, expected) in [(-3600, "Offsets 0–1 of 2"), (3600, "No messages here")] {
        let script = "const d = new Date(Date.now() + arguments[0] * 1000); \
                      return new Date(d.getTime() - d.getTimezoneOffset() * 60000).toISOString().slice(0, 16);";
        let local = browser.script(script, json!([when])).await?;
        browser.select("#browse select[name=kind]", "timestamp").await?;
        browser.fill("#browse input[name=value]", local.as_str().unwrap_or_default()).await?;
        browser.click("#browse button[type=submit]").await?;
        browser.wait_text("#page-status", expected).await?;
    }
    browser.select("#browse select[name=kind]", "offset").await?;
    browser.fill("#browse input[name=value]", "ten").await?;
    browser.click("#browse button[type=submit]").await?;
    browser.wait_text("#browse .field-error[data-for=value]", "whole number").await?;
    browser.fill("#browse input[name=value]", "0").await?;
    browser.click("#browse button[type=submit]").await?;
    browser.wait_text("#page-status", "Offsets 0–1 of 2").await?;

    browser.click("#mode-json").await?;
    browser.wait_text(".payload.json", "\"item\": \"tea\"").await?;
    browser.wait_text("#message-list", "not JSON").await?;
    console.screenshot("message-browser.png").await?;
    browser.click("#mode-hex").await?;
    browser.wait_text("#message-list", "68 65 6c 6c 6f 20 66 72").await?;
    browser.wait_text("#message-list", "7b 22 6f 72 64 65 72 22").await?;
    overview_under_traffic(console, &client, &stream, &topic).await
}

/// The overview's charts while the official client sends: the rate goes above zero.
async fn overview_under_traffic(
    console: &Console,
    client: &IggyClient,
    stream: &Identifier,
    topic: &Identifier,
) -> anyhow::Result<()> {
    console.open("/").await?;
    let check = "const e = document.getElementById('throughput-now'); return e && Number(e.dataset.messagesIn) > 0;";
    let reader = Consumer::new(Identifier::numeric(7)?);
    let producing = async {
        for round in 0..80u32 {
            let mut batch: Vec<IggyMessage> =
                (0..200).map(|i| message(u128::from(round * 1000 + i + 100), vec![b'x'; 512], None)).collect();
            client.send_messages(stream, topic, &Partitioning::balanced(), &mut batch).await?;
            // Reads too, so both directions of the charts move.
            let from = PollingStrategy::offset(u64::from(round) * 50);
            client.poll_messages(stream, topic, Some(1), &reader, &from, 100, false).await?;
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        anyhow::Ok(())
    };
    let (seen, produced) =
        tokio::join!(console.browser.wait_for("a throughput above zero", check, json!([])), producing);
    produced?;
    seen?;
    console.screenshot("overview.png").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_groups_lag_rises_then_falls_to_zero() -> anyhow::Result<()> {
    Console::run("lag", &[], lag_scenario).await
}

async fn lag_scenario(console: &mut Console) -> anyhow::Result<()> {
    let browser = &console.browser;
    let client = connect_root(&console.server.tcp_address()).await?;
    let (stream_id, topic_id) = create_stream_and_topic(&client, "lag", "events", 2).await?;
    let (stream, topic) = (named("lag"), named("events"));
    let group = client.create_consumer_group(&stream, &topic, "workers").await?;
    console.login("iggy", "iggy").await?;
    console.open(&format!("/streams/{stream_id}/topics/{topic_id}/groups/{}", group.id)).await?;
    let lag_is = "const e = document.getElementById('total-lag'); return e && e.dataset.lag === arguments[0];";
    browser.wait_for("no lag on an empty topic", lag_is, json!(["0"])).await?;

    for partition in 0..2 {
        let mut batch: Vec<IggyMessage> = (0..100)
            .map(|i| message(u128::from(partition * 1000 + i + 1), format!("event {i}").into_bytes(), None))
            .collect();
        client.send_messages(&stream, &topic, &Partitioning::partition_id(partition), &mut batch).await?;
    }
    browser.wait_for("the lag to reach 200", lag_is, json!(["200"])).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;

    let consumer = connect_root(&console.server.tcp_address()).await?;
    consumer.join_consumer_group(&stream, &topic, &named("workers")).await?;
    browser.wait_text("#members", "0, 1").await?;
    let as_group = Consumer::group(named("workers"));
    let mut consumed = 0;
    for _ in 0..40 {
        let polled =
            consumer.poll_messages(&stream, &topic, None, &as_group, &PollingStrategy::next(), 20, true).await?;
        consumed += polled.messages.len();
        if consumed >= 200 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    assert_eq!(consumed, 200, "the consumer read every message once");
    browser.wait_for("the lag to fall to zero", lag_is, json!(["0"])).await?;
    browser.wait_text(".lag-table", "99").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    console.screenshot("consumer-group-lag.png").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_without_permission_is_refused_and_told() -> anyhow::Result<()> {
    Console::run("refused", &[], refused_scenario).await
}

async fn refused_scenario(console: &mut Console) -> anyhow::Result<()> {
    let browser = &console.browser;
    let admin = connect_root(&console.server.tcp_address()).await?;
    let mut permissions = Permissions::default();
    permissions.global.read_streams = true;
    admin.create_user("viewer", "viewer-pass", UserStatus::Active, Some(permissions)).await?;

    console.open("/login").await?;
    console.submit_login("viewer", "wrong-pass").await?;
    browser.wait_text("#login .form-error", "Wrong username or password").await?;
    console.login("viewer", "viewer-pass").await?;
    console.open("/streams").await?;
    browser.fill("#create-stream input[name=name]", "not-allowed").await?;
    browser.click("#create-stream button[type=submit]").await?;
    browser.wait_text("#create-stream .form-error", "Permission denied").await?;
    let streams = admin.get_streams().await?;
    assert!(streams.iter().all(|s| s.name != "not-allowed"), "a refused create made nothing");
    console.open("/users").await?;
    browser.wait_text("main", "Permission denied").await?;
    // A failure no page handles still shows in the page (an error thrown from outside the
    // console's own scripts reaches it without its message, as "Script error").
    browser.script("setTimeout(() => { throw new Error('boom'); }); return true;", json!([])).await?;
    browser.wait_text("main", "Something went wrong: Script error. Reload the page").await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_goes_to_log_in_and_back_to_the_page() -> anyhow::Result<()> {
    let env = [("IGGY_HTTP_JWT_ACCESS_TOKEN_EXPIRY", "2 s"), ("IGGY_HTTP_JWT_CLOCK_SKEW", "1 s")];
    Console::run("expired", &env, expired_scenario).await
}

async fn expired_scenario(console: &mut Console) -> anyhow::Result<()> {
    let browser = &console.browser;
    let client = connect_root(&console.server.tcp_address()).await?;
    let (stream_id, topic_id) = create_stream_and_topic(&client, "kept", "page", 1).await?;
    console.login("iggy", "iggy").await?;
    let route = format!("/streams/{stream_id}/topics/{topic_id}");
    console.open(&route).await?;
    browser.wait_text("#topic-title", "page").await?;
    // The topic page refreshes its groups every 3 s: the first refresh after expiry is refused.
    browser.wait_text("#login", "Log in").await?;
    browser.wait_text("main", "session has expired").await?;
    console.submit_login("iggy", "iggy").await?;
    browser.wait_text("#topic-title", "page").await?;
    let hash = browser.script("return location.hash;", json!([])).await?;
    assert_eq!(hash, json!(format!("#{route}")), "back on the page the session expired on");
    assert_eq!(id_in_hash(browser, "/topics/").await?, topic_id);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_connection_is_shown_until_the_server_is_back() -> anyhow::Result<()> {
    Console::run("offline", &[], offline_scenario).await
}

async fn offline_scenario(console: &mut Console) -> anyhow::Result<()> {
    console.login("iggy", "iggy").await?;
    console.open("/").await?;
    console.browser.wait_text("#server-stats", "Streams").await?;
    console.server.kill9()?;
    let shown = "return !document.getElementById('connection').hidden;";
    console.browser.wait_for("the lost-connection banner", shown, json!([])).await?;
    console.browser.wait_text("#connection", "connection to the server is lost").await?;
    console.server.restart()?;
    let hidden = "return document.getElementById('connection').hidden;";
    console.browser.wait_for("the banner to go once the server answers", hidden, json!([])).await?;
    console.browser.wait_text("#server-stats", "Streams").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn users_tokens_clients_cluster_and_deletes_with_confirmation() -> anyhow::Result<()> {
    Console::run("pages", &[], pages_scenario).await
}

async fn pages_scenario(console: &mut Console) -> anyhow::Result<()> {
    let browser = &console.browser;
    let client = connect_root(&console.server.tcp_address()).await?;
    let (stream_id, topic_id) = create_stream_and_topic(&client, "doomed", "gone", 1).await?;
    console.login("iggy", "iggy").await?;

    console.open("/users").await?;
    browser.wait_text(".users-table", "iggy").await?;
    browser.fill("#create-user input[name=username]", "console-user").await?;
    browser.fill("#create-user input[name=password]", "pw").await?;
    browser.click("#create-user button[type=submit]").await?;
    browser.wait_text("#create-user .field-error[data-for=password]", "3 to 100").await?;
    browser.fill("#create-user input[name=password]", "console-pass").await?;
    browser.click("#create-user input[name=read_streams]").await?;
    browser.click("#create-user button[type=submit]").await?;
    browser.wait_text("main h2", "User console-user").await?;
    let checked = "return document.querySelector('#user-permissions input[name=read_streams]').checked;";
    browser.wait_for("read_streams granted", checked, json!([])).await?;
    let user = client.get_user(&named("console-user")).await?.expect("the console created the user");
    assert!(user.permissions.is_some_and(|p| p.global.read_streams && !p.global.manage_streams));

    console.open("/tokens").await?;
    browser.fill("#create-token input[name=name]", "console-token").await?;
    browser.click("#create-token button[type=submit]").await?;
    let token = "const e = document.getElementById('token-value'); return e && e.innerText.length > 20;";
    browser.wait_for("the new token shown once", token, json!([])).await?;

    console.open("/clients").await?;
    browser.wait_text(".clients-table", "tcp").await?;
    console.open("/cluster").await?;
    browser.wait_text(".nodes-table", "healthy").await?;
    browser.wait_text("#cluster-view", "").await?;

    // Retention edited in the form shows in the settings; a stored offset shows with its lag.
    let mut batch: Vec<IggyMessage> = (0..10).map(|i| message(i + 1, b"kept".to_vec(), None)).collect();
    client.send_messages(&named("doomed"), &named("gone"), &Partitioning::partition_id(0), &mut batch).await?;
    let reader = Consumer::new(Identifier::numeric(5)?);
    client.store_consumer_offset(&reader, &named("doomed"), &named("gone"), Some(0), 3).await?;
    console.open(&format!("/streams/{stream_id}/topics/{topic_id}")).await?;
    browser.wait_text(".offsets-table", "consumer\t5\t0\t3\t6").await?;
    browser.fill("#edit-topic input[name=message_expiry_s]", "3600").await?;
    browser.click("#edit-topic button[type=submit]").await?;
    browser.wait_text(".settings-table", "1 h").await?;
    let topic = client.get_topic(&named("doomed"), &named("gone")).await?.expect("topic");
    assert_eq!(topic.message_expiry, IggyExpiry::ExpireDuration(IggyDuration::from(3_600_000_000u64)));

    console.open(&format!("/streams/{stream_id}")).await?;
    browser.click("#purge-stream").await?;
    browser.click("#confirm-yes").await?;
    browser.wait_text("#stream-message", "Stream purged").await?;
    console.open(&format!("/streams/{stream_id}/topics/{topic_id}")).await?;
    browser.click("#delete-topic").await?;
    browser.click("#confirm-yes").await?;
    browser.wait_text("#stream-title", "doomed").await?;
    browser.wait_text("#topics", "Nothing here yet").await?;
    assert!(client.get_topic(&named("doomed"), &named("gone")).await?.is_none(), "the topic is deleted");

    browser.click("#logout").await?;
    browser.wait_text("#login", "Log in").await?;
    console.open("/streams").await?;
    browser.wait_text("#login", "Log in").await?;
    let kept = browser.script("return sessionStorage.getItem('rill.session');", json!([])).await?;
    assert_eq!(kept, serde_json::Value::Null, "logging out forgets the token");
    Ok(())
}
