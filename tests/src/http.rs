//! Plain HTTP/1.1 requests to a server's HTTP transport, and Prometheus samples read out of
//! `/metrics`, for tests that look at what the server exposes beside the binary protocol.

use std::io::{Read, Write};
use std::net::TcpStream;

/// One GET with an optional bearer token; returns (status, body).
pub fn get(address: &str, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect(address)?;
    let auth = token.map(|t| format!("Authorization: Bearer {t}\r\n")).unwrap_or_default();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\n{auth}Connection: close\r\n\r\n")?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response.split_whitespace().nth(1).unwrap_or("0").parse()?;
    let body = response.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    Ok((status, body))
}

/// The value of a sample line (`rill_messages`, or with its labels) of a Prometheus text.
pub fn metric(text: &str, name: &str) -> Option<u64> {
    text.lines().filter(|line| !line.starts_with('#')).find_map(|line| {
        let (key, value) = line.rsplit_once(' ')?;
        (key == name).then(|| value.parse().ok())?
    })
}

/// Reads a running server's `/metrics` with a token of its root user.
pub struct MetricsReader {
    address: String,
    token: String,
}

impl MetricsReader {
    /// A reader for the server whose HTTP API listens on `address`, through `client`
    /// (logged in as root).
    pub async fn new(client: &iggy::prelude::IggyClient, address: &str) -> anyhow::Result<Self> {
        use iggy::prelude::*;
        let token = client.create_personal_access_token("metrics", IggyExpiry::NeverExpire).await?.token;
        Ok(Self { address: address.to_owned(), token })
    }

    /// The value of metric `name`, if the server reports it.
    pub fn get(&self, name: &str) -> anyhow::Result<Option<u64>> {
        let (_, text) = get(&self.address, "/metrics", Some(&self.token))?;
        Ok(metric(&text, name))
    }
}
