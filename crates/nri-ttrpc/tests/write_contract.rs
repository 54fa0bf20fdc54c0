//! Each message is one write of one contiguous buffer followed by a flush.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use bytes::Bytes;
use common::*;
use nri_ttrpc::Client;
use tokio::io::{AsyncRead, AsyncWrite, DuplexStream, ReadBuf};

#[derive(Debug, PartialEq, Eq, Clone, Copy)]
enum Op {
    Write(usize),
    Flush,
}

/// A transport that records every write and flush call.
struct Recording {
    inner: DuplexStream,
    ops: Arc<Mutex<Vec<Op>>>,
}

impl AsyncRead for Recording {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Recording {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if let Poll::Ready(Ok(n)) = &r {
            assert_eq!(*n, buf.len(), "duplex buffer too small for this test");
            self.ops.lock().unwrap().push(Op::Write(buf.len()));
        }
        r
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.ops.lock().unwrap().push(Op::Flush);
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[tokio::test]
async fn client_and_server_write_each_message_once_then_flush() {
    let (c, s) = tokio::io::duplex(16 << 20);
    let client_ops = Arc::new(Mutex::new(Vec::new()));
    let server_ops = Arc::new(Mutex::new(Vec::new()));
    let client = Client::new(Recording {
        inner: c,
        ops: client_ops.clone(),
    });
    let _srv = Running::spawn(
        test_server(),
        Recording {
            inner: s,
            ops: server_ops.clone(),
        },
    );
    let sizes = [0usize, 10, 5000, 1 << 20];
    let calls = sizes.map(|n| {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call(SVC, "Echo", Bytes::from(vec![1u8; n]), opts())
                .await
        })
    });
    for c in calls {
        c.await.unwrap().unwrap();
    }
    for ops in [
        client_ops.lock().unwrap().clone(),
        server_ops.lock().unwrap().clone(),
    ] {
        assert_eq!(ops.len(), 2 * sizes.len(), "{ops:?}");
        for pair in ops.chunks(2) {
            assert!(
                matches!(pair, [Op::Write(n), Op::Flush] if *n >= 10),
                "{ops:?}"
            );
        }
    }
}
