//! A fed, driven client tells its input driver when each request is
//! written (`InputDriver::request_written`), before it waits, also when
//! the answer is there before the call looks for it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};
use std::task::Context;
use std::time::Duration;

use bytes::BytesMut;
use nri_ttrpc::codec::{MessageType, encode_message};
use nri_ttrpc::proto::Response;
use nri_ttrpc::{CallOptions, Client, ClientFeed, InputDriver};
use tokio::io::AsyncReadExt;

/// Records what the client asks of it; answers each call from
/// `poll_input` once it has been asked to, as a trunk reader would.
#[derive(Default)]
struct Recorder {
    log: Mutex<Vec<&'static str>>,
    feed: Mutex<Option<ClientFeed>>,
    /// An encoded answer to hand to the feed on the next poll.
    answer: Mutex<Option<BytesMut>>,
    /// One to hand to it as soon as the request is written (as if the
    /// answer had been read by someone else before the call looked).
    early: Mutex<Option<BytesMut>>,
}

impl Recorder {
    fn log(&self) -> Vec<&'static str> {
        self.log.lock().unwrap().clone()
    }
    fn feed(&self, bytes: &[u8]) {
        self.feed.lock().unwrap().as_mut().unwrap().data(bytes);
    }
}

impl InputDriver for Recorder {
    fn poll_input(&self, _cx: &mut Context<'_>) {
        self.log.lock().unwrap().push("poll");
        if let Some(a) = self.answer.lock().unwrap().take() {
            self.feed(&a);
        }
    }
    fn done(&self) {
        self.log.lock().unwrap().push("done");
    }
    fn request_written(&self) {
        self.log.lock().unwrap().push("written");
        if let Some(a) = self.early.lock().unwrap().take() {
            self.feed(&a);
        }
    }
}

fn answer(stream_id: u32) -> BytesMut {
    let mut b = BytesMut::new();
    let resp = Response {
        status: None,
        payload: bytes::Bytes::from_static(b"ok"),
    };
    encode_message(stream_id, MessageType::Response, 0, &resp, &mut b).unwrap();
    b
}

#[tokio::test]
async fn each_written_request_is_reported_before_the_call_waits() {
    let (wr, mut peer) = tokio::io::duplex(1 << 16);
    let rec = Arc::new(Recorder::default());
    let (client, feed) = Client::with_feed_driven(wr, rec.clone());
    *rec.feed.lock().unwrap() = Some(feed);
    let opts = CallOptions::new(Duration::from_secs(5));

    // The answer comes through the driver's first poll.
    *rec.answer.lock().unwrap() = Some(answer(1));
    let got = client
        .call("svc", "M", "req".into(), opts.clone())
        .await
        .unwrap();
    assert_eq!(&got[..], b"ok");
    assert_eq!(rec.log(), ["written", "poll", "done"]);

    // The answer is there before the call looks: it does not poll the
    // input, but the written request is still reported.
    rec.log.lock().unwrap().clear();
    *rec.early.lock().unwrap() = Some(answer(3));
    let got = client.call("svc", "M", "req".into(), opts).await.unwrap();
    assert_eq!(&got[..], b"ok");
    assert_eq!(rec.log(), ["written"]);

    // Both requests went out.
    let mut buf = vec![0u8; 4096];
    let n = peer.read(&mut buf).await.unwrap();
    assert!(n > 0);
}
