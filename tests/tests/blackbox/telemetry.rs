//! OpenTelemetry: with `[telemetry]` on, the server exports a span per request (command,
//! stream, topic, partition, status) and its log records over OTLP/HTTP; a small receiver
//! started here decodes what arrives.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use iggy::prelude::*;
use rill_tests::{TestServer, connect_root, id, sample_message, topic_options};

/// Every OTLP request received: (path, JSON body).
type Received = Arc<Mutex<Vec<(String, serde_json::Value)>>>;

/// An OTLP/HTTP receiver on a free port, answering 200 to each POST.
fn receiver() -> anyhow::Result<(String, Received)> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let address = listener.local_addr()?.to_string();
    let received: Received = Arc::default();
    let store = received.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut reader = BufReader::new(stream);
            let mut request_line = String::new();
            if reader.read_line(&mut request_line).is_err() {
                continue;
            }
            let path = request_line.split_whitespace().nth(1).unwrap_or("").to_owned();
            let mut length = 0;
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                    length = value.trim().parse().unwrap_or(0);
                }
            }
            let mut body = vec![0; length];
            if reader.read_exact(&mut body).is_ok()
                && let Ok(json) = serde_json::from_slice(&body)
            {
                store.lock().unwrap().push((path, json));
            }
            let _ = reader.get_mut().write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}");
        }
    });
    Ok((address, received))
}

/// The spans received, each as (name, attributes by key, status code).
fn spans(received: &Received) -> Vec<(String, serde_json::Map<String, serde_json::Value>, u64)> {
    let mut out = Vec::new();
    for (path, body) in received.lock().unwrap().iter() {
        if path != "/v1/traces" {
            continue;
        }
        for resource in body["resourceSpans"].as_array().into_iter().flatten() {
            assert_eq!(resource["resource"]["attributes"][0]["value"]["stringValue"], "rill-under-test");
            for scope in resource["scopeSpans"].as_array().into_iter().flatten() {
                for span in scope["spans"].as_array().into_iter().flatten() {
                    let attributes = span["attributes"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .map(|a| (a["key"].as_str().unwrap().to_owned(), a["value"].clone()))
                        .collect();
                    assert_eq!(span["traceId"].as_str().map(str::len), Some(32));
                    out.push((
                        span["name"].as_str().unwrap().to_owned(),
                        attributes,
                        span["status"]["code"].as_u64().unwrap_or(0),
                    ));
                }
            }
        }
    }
    out
}

fn log_bodies(received: &Received) -> Vec<String> {
    let mut out = Vec::new();
    for (path, body) in received.lock().unwrap().iter() {
        if path != "/v1/logs" {
            continue;
        }
        for resource in body["resourceLogs"].as_array().into_iter().flatten() {
            for scope in resource["scopeLogs"].as_array().into_iter().flatten() {
                for record in scope["logRecords"].as_array().into_iter().flatten() {
                    out.push(record["body"]["stringValue"].as_str().unwrap_or("").to_owned());
                }
            }
        }
    }
    out
}

#[tokio::test]
async fn requests_become_spans_and_logs_become_records_at_the_otlp_receiver() -> anyhow::Result<()> {
    let (address, received) = receiver()?;
    let traces = format!("http://{address}/v1/traces");
    let logs = format!("http://{address}/v1/logs");
    let server = TestServer::start_with_env(&[
        ("IGGY_TELEMETRY_ENABLED", "true"),
        ("IGGY_TELEMETRY_SERVICE_NAME", "rill-under-test"),
        ("IGGY_TELEMETRY_TRACES_ENDPOINT", traces.as_str()),
        ("IGGY_TELEMETRY_LOGS_ENDPOINT", logs.as_str()),
    ])?;
    let client = connect_root(&server.tcp_address()).await?;
    client.create_stream("traced").await?;
    client.create_topic(&id(0), "t", &topic_options(2)).await?;
    let mut batch: Vec<IggyMessage> = (0..5).map(sample_message).collect();
    client.send_messages(&id(0), &id(0), &Partitioning::partition_id(1), &mut batch).await?;
    let consumer = Consumer::new(id(1));
    client.poll_messages(&id(0), &id(0), Some(1), &consumer, &PollingStrategy::offset(0), 10, false).await?;
    assert!(client.delete_stream(&id(77)).await.is_err());

    let deadline = Instant::now() + Duration::from_secs(15);
    let has = |name: &str| spans(&received).iter().any(|(n, _, _)| n == name);
    // Traces and logs are posted one after the other in each flush.
    let listening = || log_bodies(&received).iter().any(|body| body.contains("rill-server is listening"));
    let all_in = || has("send_messages") && has("poll_messages") && has("delete_stream") && listening();
    while Instant::now() < deadline && !all_in() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let spans = spans(&received);
    let find =
        |name: &str| spans.iter().find(|(n, _, _)| n == name).unwrap_or_else(|| panic!("no {name} span: {spans:?}"));
    let (_, send, status) = find("send_messages");
    assert_eq!(send["stream"]["stringValue"], "0");
    assert_eq!(send["topic"]["stringValue"], "0");
    assert_eq!(send["partition"]["intValue"], "1");
    assert_eq!(send["status"]["intValue"], "0");
    assert_eq!(*status, 1, "OK");
    let (_, poll, _) = find("poll_messages");
    assert_eq!(poll["partition"]["intValue"], "1");
    let (_, delete, status) = find("delete_stream");
    assert_ne!(delete["status"]["intValue"], "0", "the refused request's status");
    assert_eq!(*status, 2, "ERROR");
    let logs = log_bodies(&received);
    assert!(logs.iter().any(|body| body.contains("rill-server is listening")), "{logs:?}");
    Ok(())
}

#[test]
fn a_transport_rill_does_not_speak_stops_the_start() -> anyhow::Result<()> {
    let env = [("IGGY_TELEMETRY_ENABLED", "true"), ("IGGY_TELEMETRY_TRACES_TRANSPORT", "grpc")];
    let (code, stderr) = rill_tests::run_until_exit(tempfile::tempdir()?.path(), &env)?;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("telemetry.traces.transport") && stderr.contains("grpc"), "{stderr}");
    Ok(())
}
