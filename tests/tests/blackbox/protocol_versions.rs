//! Raw-socket tests of the protocol gate: which client versions a login may announce, the
//! eviction the others get (reason 14 with the server's window), a malformed 0.12 login
//! (reason 15), and the dialect a login chooses for the rest of its connection.

use rill_tests::TestServer;
use rill_tests::raw::{self, COMMAND_EVICTION, COMMAND_REPLY, Request};

const CLIENT: u128 = 0x0012_0000_0000_0000_0000_0000_0000_0001;
/// A nonzero request identifier, as 0.12 clients put in `request_checksum` (not an XXH3).
const RANDOM_IDENTIFIER: u128 = 0x5eed_5eed_5eed_5eed_0000_0000_0000_0042;

const fn pack(major: u32, minor: u32, patch: u32) -> u32 {
    major << 20 | minor << 10 | patch
}

/// `[version][sdk name][sdk version]`, then a 0.12 login's bind secret if asked, then
/// root's username and password and an empty context.
fn login_body(version: u32, bind_secret: Option<&[u8]>) -> Vec<u8> {
    let mut body = version.to_le_bytes().to_vec();
    for text in ["rust-sdk", "0.11.1-edge.9"] {
        body.push(text.len() as u8);
        body.extend_from_slice(text.as_bytes());
    }
    body.extend_from_slice(bind_secret.unwrap_or_default());
    for text in ["iggy", "iggy"] {
        body.push(text.len() as u8);
        body.extend_from_slice(text.as_bytes());
    }
    body.extend_from_slice(&0u32.to_le_bytes());
    body
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unserved_version_is_evicted_with_reason_14_and_the_window() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    for version in [pack(0, 10, 0), pack(0, 12, 0), pack(0, 12, 3), pack(0, 13, 0), pack(1, 0, 0)] {
        let mut stream = raw::connect(&server.tcp_address())?;
        let body = login_body(version, (version >> 10 == 12).then_some(&[7; 32][..]));
        raw::send(&mut stream, &Request::register(CLIENT, RANDOM_IDENTIFIER).frame(&body));
        let eviction = raw::read_frame(&mut stream).expect_frame("the eviction");
        assert_eq!(eviction.command(), COMMAND_EVICTION, "{version:#x}");
        assert_eq!(eviction.eviction_reason(), 14, "{version:#x}: IncompatibleProtocol");
        assert_eq!(raw::u32_at(&eviction.0, 144), pack(0, 12, 2), "the newest version served");
        assert_eq!(raw::u32_at(&eviction.0, 148), pack(0, 11, 0), "the oldest version served");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_0_12_login_without_its_bind_secret_is_evicted_as_malformed() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let mut stream = raw::connect(&server.tcp_address())?;
    // The secret cut to 5 bytes: what follows cannot be credentials.
    let mut body = login_body(pack(0, 12, 2), None);
    body.truncate(4 + 9 + 14 + 5);
    raw::send(&mut stream, &Request::register(CLIENT, RANDOM_IDENTIFIER).frame(&body));
    let eviction = raw::read_frame(&mut stream).expect_frame("the eviction");
    assert_eq!(eviction.command(), COMMAND_EVICTION);
    assert_eq!(eviction.eviction_reason(), 15, "MalformedLogin");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_chooses_its_connections_dialect() -> anyhow::Result<()> {
    let server = TestServer::start()?;
    let flush_body = [1, 4, 1, 0, 0, 0, 1, 4, 1, 0, 0, 0, 0, 0, 0, 0, 0];
    for (version, secret, announced) in
        [(pack(0, 12, 2), Some(&[9; 32][..]), pack(0, 12, 2)), (pack(0, 11, 0), None, pack(0, 11, 0))]
    {
        let mut stream = raw::connect(&server.tcp_address())?;
        let body = login_body(version, secret);
        // A 0.12 client's random identifier is taken as it is; a 0.11 login's would have
        // to be its body's XXH3 (zero: not stamped).
        let checksum = if secret.is_some() { RANDOM_IDENTIFIER } else { 0 };
        raw::send(&mut stream, &Request::register(CLIENT, checksum).frame(&body));
        let reply = raw::read_frame(&mut stream).expect_frame("the login reply");
        assert_eq!((reply.command(), reply.status()), (COMMAND_REPLY, 0), "{version:#x}");
        assert_eq!(raw::u32_at(reply.body(), 16), announced, "the server speaks the client's generation");
        let session = raw::u64_at(reply.body(), 8);
        // FLUSH_UNSAVED_BUFFER (102) is retired in 0.12: InvalidCommand there, and served
        // (the stream is missing) on a 0.11 connection.
        let flush = Request::non_replicated(CLIENT, 1, session, 102);
        raw::send(&mut stream, &flush.frame(&flush_body));
        let reply = raw::read_frame(&mut stream).expect_frame("the flush reply");
        let expected = if secret.is_some() { 3 } else { 1009 };
        assert_eq!(reply.status(), expected, "{version:#x}: flush answered");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_the_client_list_show_each_clients_protocol() -> anyhow::Result<()> {
    use iggy::prelude::*;
    use rill_tests::http::{get, metric};
    let http = format!("127.0.0.1:{}", rill_tests::free_port());
    let server = TestServer::start_with_env(&[("IGGY_HTTP_ENABLED", "true"), ("IGGY_HTTP_ADDRESS", http.as_str())])?;
    let root = rill_tests::connect_root(&server.tcp_address()).await?;
    let token = root.create_personal_access_token("metrics", IggyExpiry::NeverExpire).await?.token;
    let mut edge = raw::connect(&server.tcp_address())?;
    let body = login_body(pack(0, 12, 2), Some(&[3; 32]));
    raw::send(&mut edge, &Request::register(CLIENT, RANDOM_IDENTIFIER).frame(&body));
    assert_eq!(raw::read_frame(&mut edge).expect_frame("the login reply").status(), 0);

    let (status, text) = get(&http, "/metrics", Some(&token))?;
    assert_eq!(status, 200, "{text}");
    assert_eq!(metric(&text, "rill_clients_by_protocol{protocol=\"0.11\"}"), Some(1), "{text}");
    assert_eq!(metric(&text, "rill_clients_by_protocol{protocol=\"0.12\"}"), Some(1), "{text}");
    let (_, clients) = get(&http, "/clients", Some(&token))?;
    let clients: serde_json::Value = serde_json::from_str(&clients)?;
    let mut protocols: Vec<&str> =
        clients.as_array().into_iter().flatten().filter_map(|c| c["protocol"].as_str()).collect();
    protocols.sort_unstable();
    assert_eq!(protocols, ["0.11", "0.12"]);
    Ok(())
}
