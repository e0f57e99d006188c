//! The WebSocket opening handshake (RFC 6455 section 4.2), server side: reads the client's
//! HTTP/1.1 upgrade request and answers 101 Switching Protocols, or refuses it with a plain
//! HTTP error. No extension or subprotocol is ever agreed to.

use std::io;

use compio::buf::{BufResult, IoBuf};
use compio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// An upgrade request larger than this is refused (browsers send well under 2 KiB).
const MAX_REQUEST_BYTES: usize = 8 * 1024;

/// What the bytes read so far amount to.
#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// The header block has not ended yet.
    Incomplete,
    /// A valid upgrade: send `response`; the request took the first `consumed` bytes.
    Upgrade { response: Vec<u8>, consumed: usize },
    /// Not an acceptable upgrade: send `response` and close.
    Refused { response: Vec<u8>, why: &'static str },
}

fn refusal(status: &str, extra: &str, why: &'static str) -> Request {
    let response = format!("HTTP/1.1 {status}\r\n{extra}Connection: close\r\nContent-Length: 0\r\n\r\n").into_bytes();
    Request::Refused { response, why }
}

/// Whether a comma-separated header value lists `token` (case-insensitive).
fn lists(value: &[u8], token: &str) -> bool {
    String::from_utf8_lossy(value).split(',').any(|item| item.trim().eq_ignore_ascii_case(token))
}

fn find_header<'a>(headers: &[httparse::Header<'a>], name: &'static str) -> Option<&'a [u8]> {
    headers.iter().find(|header| header.name.eq_ignore_ascii_case(name)).map(|header| header.value)
}

/// Reads an upgrade request from `bytes` (everything received so far).
pub fn parse(bytes: &[u8]) -> Request {
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut headers);
    let consumed = match request.parse(bytes) {
        Ok(httparse::Status::Complete(consumed)) => consumed,
        Ok(httparse::Status::Partial) if bytes.len() < MAX_REQUEST_BYTES => return Request::Incomplete,
        Ok(httparse::Status::Partial) => {
            return refusal("431 Request Header Fields Too Large", "", "request too large");
        }
        Err(_) => return refusal("400 Bad Request", "", "not an HTTP request"),
    };
    if !matches!(request.method, Some("GET")) || request.version != Some(1) {
        return refusal("400 Bad Request", "", "not an HTTP/1.1 GET");
    }
    let headers = &*request.headers;
    if !find_header(headers, "Upgrade").is_some_and(|value| lists(value, "websocket"))
        || !find_header(headers, "Connection").is_some_and(|value| lists(value, "upgrade"))
    {
        return refusal("400 Bad Request", "", "not a WebSocket upgrade");
    }
    if find_header(headers, "Sec-WebSocket-Version").is_none_or(|version| version.trim_ascii() != b"13") {
        return refusal("426 Upgrade Required", "Sec-WebSocket-Version: 13\r\n", "unsupported WebSocket version");
    }
    let key = find_header(headers, "Sec-WebSocket-Key").unwrap_or_default().trim_ascii();
    if key.is_empty() {
        return refusal("400 Bad Request", "", "no Sec-WebSocket-Key");
    }
    let accept = tungstenite::handshake::derive_accept_key(key);
    let response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
    )
    .into_bytes();
    Request::Upgrade { response, consumed }
}

/// Performs the handshake on `stream`. Returns the bytes the client sent after its request
/// (clients wait for the 101 first, so normally none).
pub async fn accept<S: AsyncRead + AsyncWrite>(stream: &mut S) -> io::Result<Vec<u8>> {
    let mut received = Vec::with_capacity(1024);
    loop {
        if received.len() == received.capacity() {
            received.reserve(1024);
        }
        let BufResult(read, buf) = stream.append(received).await;
        received = buf;
        if read? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed during the WebSocket handshake"));
        }
        match parse(&received) {
            Request::Incomplete => continue,
            Request::Upgrade { response, consumed } => {
                write_all(stream, response).await?;
                received.drain(..consumed);
                return Ok(received);
            }
            Request::Refused { response, why } => {
                let _ = write_all(stream, response).await;
                return Err(io::Error::new(io::ErrorKind::InvalidData, why));
            }
        }
    }
}

async fn write_all<S: AsyncWrite, B: IoBuf>(stream: &mut S, bytes: B) -> io::Result<()> {
    let BufResult(written, _) = stream.write_all(bytes).await;
    written?;
    stream.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "GET /chat HTTP/1.1\r\nHost: localhost\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n";

    #[test]
    fn a_valid_request_gets_the_rfc_accept_key() {
        let Request::Upgrade { response, consumed } = parse(GOOD.as_bytes()) else { panic!("refused") };
        assert_eq!(consumed, GOOD.len());
        let response = String::from_utf8(response).unwrap();
        assert!(response.starts_with("HTTP/1.1 101 "), "{response}");
        // The worked example of RFC 6455 section 1.3.
        assert!(response.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n"), "{response}");
    }

    #[test]
    fn a_request_in_pieces_waits_and_trailing_bytes_are_left() {
        assert_eq!(parse(&GOOD.as_bytes()[..40]), Request::Incomplete);
        let with_more = format!("{GOOD}\u{82}");
        let Request::Upgrade { consumed, .. } = parse(with_more.as_bytes()) else { panic!("refused") };
        assert_eq!(consumed, GOOD.len());
    }

    #[test]
    fn bad_upgrades_are_refused_with_an_http_status() {
        let cases = [
            (GOOD.replace("GET", "POST"), "400"),
            (GOOD.replace("Upgrade: websocket", "Upgrade: h2c"), "400"),
            (GOOD.replace("keep-alive, Upgrade", "keep-alive"), "400"),
            (GOOD.replace("Version: 13", "Version: 8"), "426"),
            (GOOD.replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", ""), "400"),
            ("\u{16}\u{3}\u{1}garbage\r\n\r\n".to_owned(), "400"),
        ];
        for (request, status) in cases {
            let Request::Refused { response, .. } = parse(request.as_bytes()) else { panic!("accepted {request:?}") };
            assert!(String::from_utf8(response).unwrap().starts_with(&format!("HTTP/1.1 {status}")), "{request:?}");
        }
        let endless = format!("GET / HTTP/1.1\r\nX: {}", "a".repeat(MAX_REQUEST_BYTES));
        assert!(matches!(parse(endless.as_bytes()), Request::Refused { .. }));
    }
}
