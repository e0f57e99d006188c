//! Serving a shard's inbox: calls from other shards run side by side inside the one task that
//! reads the inbox, so a crossing spawns no task; handed-off connections go to the transport
//! that adopts them.

use std::future::{Future, poll_fn};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::task::Poll;

use futures_util::stream::{FuturesUnordered, StreamExt};

use crate::ports::bus::ConnectionKind;
use crate::ports::{BusReply, Delivery, Inbox, Responder, ShardRequest};

/// Serves `inbox` until it closes or delivers `Shutdown`. Each call's reply future joins the
/// in-flight set; completions are driven before the next delivery is read, so finished work
/// answers first and a burst of arrivals cannot starve calls already running. Calls still in
/// flight at shutdown are dropped, which their callers see as an unavailable shard.
pub async fn serve<I, C, F>(
    inbox: &I,
    mut on_call: C,
    mut on_connection: impl FnMut(OwnedFd, SocketAddr, ConnectionKind),
) where
    I: Inbox,
    C: FnMut(ShardRequest) -> F,
    F: Future<Output = BusReply>,
{
    let mut in_flight = FuturesUnordered::new();
    let mut next = Box::pin(inbox.next());
    loop {
        let delivery = poll_fn(|cx| {
            while let Poll::Ready(Some(())) = in_flight.poll_next_unpin(cx) {}
            next.as_mut().poll(cx)
        })
        .await;
        next = Box::pin(inbox.next());
        match delivery {
            None | Some(Delivery::Shutdown) => return,
            Some(Delivery::Call { request, reply }) => {
                let call = on_call(request);
                in_flight.push(async move { reply.reply(call.await) });
            }
            Some(Delivery::Connection { fd, peer, kind }) => on_connection(fd, peer, kind),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;
    use std::rc::Rc;

    use futures_channel::{mpsc, oneshot};
    use futures_util::StreamExt;

    use super::*;
    use crate::ports::Reply;
    use rill_domain::answer::Answer;

    struct TestInbox(async_lock::Mutex<mpsc::UnboundedReceiver<Delivery<oneshot::Sender<BusReply>>>>);

    impl Responder for oneshot::Sender<BusReply> {
        fn reply(self, reply: BusReply) {
            let _ = self.send(reply);
        }
    }

    impl Inbox for TestInbox {
        type Responder = oneshot::Sender<BusReply>;
        async fn next(&self) -> Option<Delivery<Self::Responder>> {
            self.0.lock().await.next().await
        }
    }

    fn flush(operation: u8) -> ShardRequest {
        ShardRequest::Metadata { operation, body: Vec::new() }
    }

    #[test]
    fn a_waiting_call_does_not_hold_up_later_ones_and_shutdown_ends_the_loop() {
        let (deliver, receiver) = mpsc::unbounded();
        let inbox = TestInbox(async_lock::Mutex::new(receiver));
        let (release, released) = oneshot::channel::<()>();
        let released = Rc::new(RefCell::new(Some(released)));
        let on_call = move |request: ShardRequest| {
            let gate = released.borrow_mut().take();
            async move {
                // The first call waits for the test to release it; the others answer at once.
                if let Some(gate) = gate {
                    let _ = gate.await;
                }
                let ShardRequest::Metadata { operation, .. } = request else { unreachable!("only metadata sent") };
                Ok(Reply::Answer(Answer::Snapshot(vec![operation])))
            }
        };
        let (first, first_reply) = oneshot::channel();
        let (second, second_reply) = oneshot::channel();
        deliver.unbounded_send(Delivery::Call { request: flush(1), reply: first }).expect("open");
        deliver.unbounded_send(Delivery::Call { request: flush(2), reply: second }).expect("open");
        let mut pool = futures_executor::LocalPool::new();
        let served = Rc::new(RefCell::new(false));
        let done = served.clone();
        use futures_util::task::LocalSpawnExt;
        pool.spawner()
            .spawn_local(async move {
                serve(&inbox, on_call, |_, _, _| {}).await;
                *done.borrow_mut() = true;
            })
            .expect("spawned");
        pool.run_until_stalled();
        let mut first_reply = first_reply;
        assert_eq!(first_reply.try_recv().expect("open"), None, "the first call still waits");
        let mut second_reply = second_reply;
        let second = second_reply.try_recv().expect("open").expect("the second call answered meanwhile");
        assert_eq!(second.and_then(Reply::into_answer), Ok(Answer::Snapshot(vec![2])));
        release.send(()).expect("the first call waits");
        let first = pool.run_until(first_reply).expect("answered");
        assert_eq!(first.and_then(Reply::into_answer), Ok(Answer::Snapshot(vec![1])));
        deliver.unbounded_send(Delivery::Shutdown).expect("open");
        pool.run_until_stalled();
        assert!(*served.borrow(), "shutdown ends the loop");
    }
}
