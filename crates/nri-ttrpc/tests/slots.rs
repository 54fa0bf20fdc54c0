//! A service that starts its calls in the server's slots
//! (`Service::call_in` with `HandlerSlot::set`) gets its large handler
//! futures without a new allocation per request: the server hands the
//! slot of a finished call to the next one. Counted by a global allocator
//! that notes, per thread, every allocation of 4 KiB or more (a fed
//! server runs handlers that answer at once on the feeding thread).
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::future::Future;

use bytes::{Bytes, BytesMut};
use common::counting::{BIG, Counting, big_allocs};
use common::*;
use nri_ttrpc::codec::{self, MessageType};
use nri_ttrpc::{BoxFuture, HandlerResult, HandlerSlot, RequestContext, Server, Service, Status};
use tokio_util::sync::CancellationToken;

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A handler future of more than `BIG` bytes that answers at once.
fn big_future(payload: Bytes) -> impl Future<Output = HandlerResult> + Send + 'static {
    let pad = [7u8; BIG];
    async move {
        let pad = std::hint::black_box(pad);
        if pad[BIG - 1] != 7 {
            return Err(Status::new(nri_ttrpc::Code::Internal, "bad pad"));
        }
        Ok(payload)
    }
}

/// Starts its calls in the server's slot (`reuse`) or boxes them.
struct BigService {
    reuse: bool,
}

impl Service for BigService {
    fn call(
        &self,
        _ctx: RequestContext,
        _m: &str,
        payload: Bytes,
    ) -> BoxFuture<'static, HandlerResult> {
        Box::pin(big_future(payload))
    }

    fn call_in(&self, ctx: RequestContext, m: &str, payload: Bytes, slot: &mut HandlerSlot) {
        if self.reuse {
            slot.set(big_future(payload));
        } else {
            slot.set(self.call(ctx, m, payload));
        }
    }
}

fn request_bytes(stream_id: u32, payload: &[u8]) -> Vec<u8> {
    let mut b = BytesMut::new();
    codec::encode_message(
        stream_id,
        MessageType::Request,
        0,
        &request("Any", payload),
        &mut b,
    )
    .unwrap();
    b.to_vec()
}

/// Feeds 1 + `n` requests one after the other to a server of
/// `BigService` and returns how many allocations of `BIG` bytes or more
/// the last `n` made (the first may set things up).
async fn big_allocs_for(reuse: bool, n: u32) -> usize {
    let mut server = Server::new();
    server.register(SVC, BigService { reuse }).unwrap();
    let (wr, peer_io) = tokio::io::duplex(DUPLEX);
    let (mut feed, serving) = server.serve_fed(wr, CancellationToken::new());
    let serving = tokio::spawn(serving);
    let mut peer = RawPeer::new(peer_io);
    let mut before = 0;
    for i in 0..=n {
        if i == 1 {
            before = big_allocs();
        }
        let id = 2 * i + 1;
        feed.data(&request_bytes(id, &i.to_be_bytes()));
        let (got, resp) = peer.recv_response().await;
        assert_eq!((got, &resp.payload[..]), (id, &i.to_be_bytes()[..]));
    }
    let count = big_allocs() - before;
    feed.end(None);
    serving.await.unwrap().unwrap();
    count
}

#[tokio::test(flavor = "current_thread")]
async fn handler_futures_reuse_the_slot_of_the_previous_call() {
    // Boxed by `call`: one large allocation per request.
    assert_eq!(big_allocs_for(false, 10).await, 10);
    // Set in the slot: the first request's allocation is reused.
    assert_eq!(big_allocs_for(true, 10).await, 0);
}
