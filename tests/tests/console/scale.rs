//! The console at size: a thousand streams and a partition of a million messages. The pages
//! page instead of loading everything; the test prints the time to first render of each
//! (figures for the notes, never asserted on) and writes them beside the screenshots.

use std::time::{Duration, Instant};

use iggy::prelude::*;
use rill_tests::browser::screenshot_dir;
use rill_tests::{connect_root, create_stream_and_topic, message, named};

use crate::Console;

const STREAMS: usize = 1000;
const MESSAGES: u32 = 1_000_000;
const BATCH: u32 = 10_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_stay_usable_at_a_thousand_streams_and_a_million_messages() -> anyhow::Result<()> {
    Console::run("scale", &[], scale_scenario).await
}

async fn scale_scenario(console: &mut Console) -> anyhow::Result<()> {
    let browser = &console.browser;
    let client = connect_root(&console.server.tcp_address()).await?;
    let (stream_id, topic_id) = create_stream_and_topic(&client, "big", "t", 1).await?;
    let (stream, topic) = (named("big"), named("t"));
    let started = Instant::now();
    for first in (0..MESSAGES).step_by(BATCH as usize) {
        let mut batch: Vec<IggyMessage> = (first..first + BATCH)
            .map(|n| message(u128::from(n) + 1, format!("message {n:07}").into_bytes(), None))
            .collect();
        client.send_messages(&stream, &topic, &Partitioning::partition_id(0), &mut batch).await?;
    }
    let filled = started.elapsed();
    for n in 1..STREAMS {
        client.create_stream(&format!("s-{n:04}")).await?;
    }

    console.login("iggy", "iggy").await?;
    let streams_render = time_to(console, "/streams", "#streams-status", &format!("1–50 of {STREAMS}")).await?;
    browser.click("#streams-next").await?;
    browser.wait_text("#streams-status", &format!("51–100 of {STREAMS}")).await?;
    browser.fill("#streams-filter", "s-0999").await?;
    browser.wait_text("#streams-status", "1–1 of 1").await?;
    browser.wait_text(".streams-table", "s-0999").await?;

    let route = format!("/streams/{stream_id}/topics/{topic_id}/messages?partition=0&kind=last&count=50");
    let last_page = time_to(console, &route, "#page-status", "Offsets 999,950–999,999 of 1,000,000").await?;
    browser.wait_text("#message-list", "message 0999999").await?;
    browser.click("#page-older").await?;
    browser.wait_text("#page-status", "Offsets 999,900–999,949").await?;
    let middle =
        format!("/streams/{stream_id}/topics/{topic_id}/messages?partition=0&kind=offset&value=500000&count=50");
    let middle_page = time_to(console, &middle, "#page-status", "Offsets 500,000–500,049").await?;
    let rendered = browser
        .script("return document.querySelectorAll('#message-list .message').length;", serde_json::json!([]))
        .await?;
    assert_eq!(rendered, serde_json::json!(50), "one page of messages is drawn, not the partition");
    let topic_page =
        time_to(console, &format!("/streams/{stream_id}/topics/{topic_id}"), ".partitions-table", "1,000,000").await?;

    let report = format!(
        "console time to first render (debug server, headless Chromium): streams list of {STREAMS} streams {} ms; \
         message browser, last page of a {MESSAGES}-message partition {} ms, a page from its middle {} ms; \
         topic page {} ms (the partition was filled in {:.1} s)\n",
        streams_render.as_millis(),
        last_page.as_millis(),
        middle_page.as_millis(),
        topic_page.as_millis(),
        filled.as_secs_f64(),
    );
    eprint!("{report}");
    std::fs::create_dir_all(screenshot_dir())?;
    std::fs::write(screenshot_dir().join("render-times.txt"), report)?;
    Ok(())
}

/// Opens `route` and measures until the text under `selector` contains `needle`.
async fn time_to(console: &Console, route: &str, selector: &str, needle: &str) -> anyhow::Result<Duration> {
    // A blank page first, so the measure starts from nothing drawn.
    console.browser.open("about:blank").await?;
    let started = Instant::now();
    console.open(route).await?;
    console.browser.wait_text(selector, needle).await?;
    Ok(started.elapsed())
}
