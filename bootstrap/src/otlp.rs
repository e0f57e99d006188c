//! OpenTelemetry export (`[telemetry]`, Iggy's keys) over OTLP/HTTP with the JSON encoding:
//! a span per binary request (command, stream, topic, partition, status) and the server's
//! log records, batched by one exporter thread and POSTed to `telemetry.traces.endpoint`
//! and `telemetry.logs.endpoint` at most every second. The shards only `try_send` into
//! bounded queues: a slow or absent collector drops telemetry, never delays a request.
//! Only `http://` endpoints are spoken (a local collector or agent forwards further).

use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::mpsc::{Receiver, RecvTimeoutError, SyncSender, sync_channel};
use std::time::{Duration, Instant, SystemTime};

use rill_application::shared::RequestTrace;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, Layer};

/// Queued items per signal before new ones are dropped.
const QUEUE: usize = 8192;
/// Items per POST.
const BATCH: usize = 512;
const FLUSH_EVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelemetryConfig {
    pub service_name: String,
    pub traces_endpoint: Endpoint,
    pub logs_endpoint: Endpoint,
}

/// An `http://host:port/path` endpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub authority: String,
    pub path: String,
}

impl Endpoint {
    pub fn parse(url: &str) -> Result<Self, String> {
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("`{url}`: only http:// endpoints are spoken (point it at a local OpenTelemetry collector)")
        })?;
        let (authority, path) = rest.split_once('/').map_or((rest, "/".to_owned()), |(a, p)| (a, format!("/{p}")));
        if authority.is_empty() {
            return Err(format!("`{url}`: no host"));
        }
        let authority = if authority.contains(':') { authority.to_owned() } else { format!("{authority}:80") };
        Ok(Self { authority, path })
    }
}

/// One log event, as the layer saw it.
#[derive(Debug, Clone)]
pub struct LogRecord {
    unix_ns: u128,
    level: tracing::Level,
    target: String,
    message: String,
}

/// The queues the server and the logging layer push into.
pub struct Exporter {
    pub traces: SyncSender<RequestTrace>,
    pub logs: SyncSender<LogRecord>,
}

/// Starts the exporter thread.
pub fn start(config: TelemetryConfig) -> std::io::Result<Exporter> {
    let (traces, trace_queue) = sync_channel(QUEUE);
    let (logs, log_queue) = sync_channel(QUEUE);
    std::thread::Builder::new().name("rill-otlp".into()).spawn(move || export(config, trace_queue, log_queue))?;
    Ok(Exporter { traces, logs })
}

fn export(config: TelemetryConfig, traces: Receiver<RequestTrace>, logs: Receiver<LogRecord>) {
    let mut spans = Vec::new();
    let mut records = Vec::new();
    let mut last_flush = Instant::now();
    loop {
        let open = match traces.recv_timeout(Duration::from_millis(100)) {
            Ok(trace) => {
                spans.push(trace);
                true
            }
            Err(RecvTimeoutError::Timeout) => true,
            Err(RecvTimeoutError::Disconnected) => false,
        };
        spans.extend(traces.try_iter().take(BATCH));
        records.extend(logs.try_iter().take(BATCH));
        if spans.len() >= BATCH || records.len() >= BATCH || last_flush.elapsed() >= FLUSH_EVERY || !open {
            if !spans.is_empty() {
                post(&config.traces_endpoint, &traces_json(&config.service_name, &spans));
                spans.clear();
            }
            if !records.is_empty() {
                post(&config.logs_endpoint, &logs_json(&config.service_name, &records));
                records.clear();
            }
            last_flush = Instant::now();
        }
        if !open {
            return;
        }
    }
}

/// One POST; a collector that is down loses this batch (reported on stderr only, since a
/// log event would come back here).
fn post(endpoint: &Endpoint, body: &str) {
    let sent = (|| -> std::io::Result<()> {
        let mut stream = TcpStream::connect(&endpoint.authority)?;
        stream.set_write_timeout(Some(Duration::from_secs(5)))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        write!(
            stream,
            "POST {} HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            endpoint.path,
            endpoint.authority,
            body.len()
        )?;
        let mut reply = Vec::new();
        stream.read_to_end(&mut reply)?;
        Ok(())
    })();
    if let Err(error) = sent {
        eprintln!("rill-server: OTLP export to {}{} failed: {error}", endpoint.authority, endpoint.path);
    }
}

/// A JSON string literal.
fn quoted(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn string_attribute(key: &str, value: &str) -> String {
    format!("{{\"key\":{},\"value\":{{\"stringValue\":{}}}}}", quoted(key), quoted(value))
}

fn int_attribute(key: &str, value: u64) -> String {
    format!("{{\"key\":{},\"value\":{{\"intValue\":\"{value}\"}}}}", quoted(key))
}

fn resource(service_name: &str) -> String {
    format!("{{\"attributes\":[{}]}}", string_attribute("service.name", service_name))
}

fn random_hex(bytes: usize) -> String {
    (0..bytes).map(|_| format!("{:02x}", rand::random::<u8>())).collect()
}

/// `ExportTraceServiceRequest` in OTLP's JSON mapping: one server span per request.
pub fn traces_json(service_name: &str, traces: &[RequestTrace]) -> String {
    let spans: Vec<String> = traces
        .iter()
        .map(|trace| {
            let start_ns = trace.start_unix_us as u128 * 1000;
            let end_ns = start_ns + trace.duration_us as u128 * 1000;
            let mut attributes = vec![string_attribute("command", trace.command), int_attribute("status", trace.status as u64)];
            attributes.push(int_attribute("shard", trace.shard as u64));
            if let Some(stream) = &trace.stream {
                attributes.push(string_attribute("stream", stream));
            }
            if let Some(topic) = &trace.topic {
                attributes.push(string_attribute("topic", topic));
            }
            if let Some(partition) = trace.partition {
                attributes.push(int_attribute("partition", partition as u64));
            }
            // OTLP status codes: 1 OK, 2 ERROR.
            let status = if trace.status == 0 { "{\"code\":1}".to_owned() } else { format!("{{\"code\":2,\"message\":\"status {}\"}}", trace.status) };
            format!(
                "{{\"traceId\":\"{}\",\"spanId\":\"{}\",\"name\":{},\"kind\":2,\"startTimeUnixNano\":\"{start_ns}\",\"endTimeUnixNano\":\"{end_ns}\",\"attributes\":[{}],\"status\":{status}}}",
                random_hex(16),
                random_hex(8),
                quoted(trace.command),
                attributes.join(",")
            )
        })
        .collect();
    format!(
        "{{\"resourceSpans\":[{{\"resource\":{},\"scopeSpans\":[{{\"scope\":{{\"name\":\"rill-server\"}},\"spans\":[{}]}}]}}]}}",
        resource(service_name),
        spans.join(",")
    )
}

/// `ExportLogsServiceRequest` in OTLP's JSON mapping.
pub fn logs_json(service_name: &str, records: &[LogRecord]) -> String {
    let records: Vec<String> = records
        .iter()
        .map(|record| {
            let severity = match record.level {
                tracing::Level::TRACE => 1,
                tracing::Level::DEBUG => 5,
                tracing::Level::INFO => 9,
                tracing::Level::WARN => 13,
                tracing::Level::ERROR => 17,
            };
            format!(
                "{{\"timeUnixNano\":\"{}\",\"severityNumber\":{severity},\"severityText\":\"{}\",\"body\":{{\"stringValue\":{}}},\"attributes\":[{}]}}",
                record.unix_ns,
                record.level,
                quoted(&record.message),
                string_attribute("target", &record.target)
            )
        })
        .collect();
    format!(
        "{{\"resourceLogs\":[{{\"resource\":{},\"scopeLogs\":[{{\"scope\":{{\"name\":\"rill-server\"}},\"logRecords\":[{}]}}]}}]}}",
        resource(service_name),
        records.join(",")
    )
}

/// A `tracing` layer that queues every event (the filter in front of it applies) as an OTLP
/// log record: the message, then the fields as `key=value`.
pub struct LogLayer {
    pub sender: SyncSender<LogRecord>,
}

struct Fields(String);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let message = format!("{value:?}");
            self.0.insert_str(0, &message);
        } else {
            let _ = write!(self.0, " {}={value:?}", field.name());
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" {
            self.0.insert_str(0, value);
        } else {
            let _ = write!(self.0, " {}={value}", field.name());
        }
    }
}

impl<S: tracing::Subscriber> Layer<S> for LogLayer {
    fn on_event(&self, event: &tracing::Event<'_>, _context: Context<'_, S>) {
        let mut fields = Fields(String::new());
        event.record(&mut fields);
        let unix_ns = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let record = LogRecord {
            unix_ns,
            level: *event.metadata().level(),
            target: event.metadata().target().to_owned(),
            message: fields.0,
        };
        let _ = self.sender.try_send(record);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_are_plain_http_urls() {
        assert_eq!(
            Endpoint::parse("http://localhost:4318/v1/traces").unwrap(),
            Endpoint { authority: "localhost:4318".into(), path: "/v1/traces".into() }
        );
        assert_eq!(Endpoint::parse("http://collector").unwrap().authority, "collector:80");
        assert!(Endpoint::parse("https://collector/v1/logs").unwrap_err().contains("http://"));
        assert!(Endpoint::parse("grpc://x").is_err());
    }

    #[test]
    fn span_and_log_documents_carry_what_the_collector_needs() {
        let trace = RequestTrace {
            command: "send_messages",
            stream: Some("orders".into()),
            topic: Some("0".into()),
            partition: Some(2),
            status: 0,
            start_unix_us: 1_700_000_000_000_000,
            duration_us: 250,
            shard: 1,
        };
        let traces = traces_json("rill", &[trace]);
        for needle in [
            "\"resourceSpans\"",
            "\"service.name\"",
            "\"name\":\"send_messages\"",
            "{\"key\":\"stream\",\"value\":{\"stringValue\":\"orders\"}}",
            "{\"key\":\"partition\",\"value\":{\"intValue\":\"2\"}}",
            "\"startTimeUnixNano\":\"1700000000000000000\"",
            "\"endTimeUnixNano\":\"1700000000000250000\"",
            "\"status\":{\"code\":1}",
        ] {
            assert!(traces.contains(needle), "{needle} in {traces}");
        }
        let record =
            LogRecord { unix_ns: 5, level: tracing::Level::WARN, target: "t".into(), message: "say \"hi\"\n".into() };
        let logs = logs_json("rill", &[record]);
        assert!(logs.contains("\"severityNumber\":13") && logs.contains("say \\\"hi\\\"\\n"), "{logs}");
    }
}
