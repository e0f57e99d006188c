//! The bus hop on its own: requests per second from one shard to another and back, with the
//! serving shard running the application's inbox loop (or, with `--spawn`, one task spawned
//! per request, the loop it replaced). Each shard is a thread with its own compio runtime, as
//! in the server. Usage: `bus_hop [--spawn] [--requests N] [--in-flight K]`.

use std::time::Instant;

use futures_util::future::join_all;
use rill_adapter_bus_crossfire::{Inbox, bus};
use rill_application::partition::ConsumerKey;
use rill_application::ports::{Delivery, Inbox as _, PartitionOp, Reply, Responder as _, ShardBus, ShardRequest};
use rill_domain::Namespace;

struct Options {
    spawn: bool,
    requests: u64,
    in_flight: u64,
}

fn options() -> Options {
    let mut options = Options { spawn: false, requests: 1_000_000, in_flight: 1 };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        let mut number = || args.next().and_then(|value| value.parse().ok()).expect("a number after the flag");
        match arg.as_str() {
            "--spawn" => options.spawn = true,
            "--requests" => options.requests = number(),
            "--in-flight" => options.in_flight = number(),
            other => panic!("unknown argument {other}"),
        }
    }
    options
}

/// A request as small as a real one: reading a consumer offset on partition 1.
fn request() -> ShardRequest {
    ShardRequest::Partition {
        namespace: Namespace::new(1, 1, 1).expect("a valid namespace"),
        op: PartitionOp::GetOffset { key: ConsumerKey::Consumer(1) },
    }
}

async fn serve(inbox: Inbox, spawn: bool) {
    if !spawn {
        let answer = |_request| async { Ok(Reply::Answer(rill_domain::answer::Answer::Nothing)) };
        return rill_application::inbox::serve(&inbox, answer, |_, _, _| {}).await;
    }
    while let Some(delivery) = inbox.next().await {
        match delivery {
            Delivery::Call { reply, .. } => {
                compio::runtime::spawn(
                    async move { reply.reply(Ok(Reply::Answer(rill_domain::answer::Answer::Nothing))) },
                )
                .detach()
            }
            Delivery::Connection { .. } => {}
            Delivery::Shutdown => return,
        }
    }
}

fn main() {
    let options = options();
    let (mut buses, mut inboxes) = bus(2, 1024);
    let (server_inbox, caller_bus) = (inboxes.pop().expect("two inboxes"), buses.remove(0));
    let server_bus = buses.pop().expect("two buses");
    let spawn = options.spawn;
    let server = std::thread::spawn(move || {
        compio::runtime::Runtime::new().expect("runtime").block_on(serve(server_inbox, spawn));
        drop(server_bus);
    });
    let per_caller = options.requests / options.in_flight;
    let elapsed = compio::runtime::Runtime::new().expect("runtime").block_on(async {
        let started = Instant::now();
        let callers = (0..options.in_flight).map(|_| async {
            for _ in 0..per_caller {
                caller_bus.call(1, request()).await.expect("the serving shard answers");
            }
        });
        join_all(callers).await;
        let elapsed = started.elapsed();
        caller_bus.shutdown_all().await;
        elapsed
    });
    server.join().expect("the serving shard ends");
    let total = per_caller * options.in_flight;
    let mode = if options.spawn { "task per request" } else { "inbox loop" };
    println!(
        "bus hop ({mode}, {} in flight): {total} requests in {:.3} s = {:.0} requests/s, {:.2} us per round trip",
        options.in_flight,
        elapsed.as_secs_f64(),
        total as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / per_caller as f64,
    );
}
