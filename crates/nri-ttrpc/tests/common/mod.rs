//! Helpers shared by the integration tests.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

pub mod counting;

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use nri_ttrpc::codec::{self, Decoder, Frame, MessageType};
use nri_ttrpc::{CallOptions, Client, Code, Error, Methods, Request, Response, Server, Status};
use prost::Message;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Service name used by the test server.
pub const SVC: &str = "test.v1.Echo";

/// Duplex buffer size used by the tests.
pub const DUPLEX: usize = 1 << 20;

/// Options with a generous timeout.
pub fn opts() -> CallOptions {
    CallOptions::new(Duration::from_secs(30))
}

/// A server with the test service:
/// * `Echo`: returns the payload;
/// * `Sleep`: sleeps for the number of milliseconds in the payload (u64 BE), then echoes it;
/// * `Fail`: answers NOT_FOUND "nope";
/// * `Big`: answers with a payload of the length in the payload (u64 BE);
/// * `Meta`: answers with all metadata as `k=v;` pairs;
/// * `Deadline`: answers "none" or the remaining time in ms until the deadline;
/// * `Panic`: panics;
/// * `Forever`: never answers.
pub fn test_server() -> Server {
    let methods = Methods::new()
        .add("Echo", |_ctx, p: Bytes| async move { Ok(p) })
        .add("Sleep", |_ctx, p: Bytes| async move {
            let ms = u64::from_be_bytes(p[..8].try_into().unwrap());
            tokio::time::sleep(Duration::from_millis(ms)).await;
            Ok(p)
        })
        .add("Fail", |_ctx, _p| async move {
            Err(Status::new(Code::NotFound, "nope"))
        })
        .add("Big", |_ctx, p: Bytes| async move {
            let n = u64::from_be_bytes(p[..8].try_into().unwrap()) as usize;
            Ok(Bytes::from(vec![7u8; n]))
        })
        .add("Meta", |ctx, _p| async move {
            let s: String = ctx
                .metadata()
                .iter()
                .map(|kv| format!("{}={};", kv.key, kv.value))
                .collect();
            Ok(Bytes::from(s))
        })
        .add("Deadline", |ctx, _p| async move {
            let s = match ctx.deadline() {
                None => "none".to_string(),
                Some(d) => (d - tokio::time::Instant::now()).as_millis().to_string(),
            };
            Ok(Bytes::from(s))
        })
        .add("Panic", |_ctx, _p| async move {
            if true {
                panic!("boom");
            }
            Ok(Bytes::new())
        })
        .add("Forever", |_ctx, _p| async move {
            std::future::pending::<()>().await;
            Ok(Bytes::new())
        });
    let mut server = Server::new();
    server.register(SVC, methods).unwrap();
    server
}

/// A running server task on one end of a duplex.
pub struct Running {
    pub shutdown: CancellationToken,
    pub task: JoinHandle<Result<(), Error>>,
}

impl Running {
    /// Spawns `server.serve(io)`.
    pub fn spawn<T>(server: Server, io: T) -> Self
    where
        T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + 'static,
    {
        let shutdown = CancellationToken::new();
        let token = shutdown.clone();
        let task = tokio::spawn(async move { server.serve(io, token).await });
        Running { shutdown, task }
    }

    /// Waits for serve() to end and returns its result.
    pub async fn join(self) -> Result<(), Error> {
        self.task.await.unwrap()
    }
}

/// A client connected to the test server.
pub fn pair() -> (Client, Running) {
    let (c, s) = tokio::io::duplex(DUPLEX);
    (Client::new(c), Running::spawn(test_server(), s))
}

/// u64 big-endian payload.
pub fn u64_payload(v: u64) -> Bytes {
    Bytes::copy_from_slice(&v.to_be_bytes())
}

/// A peer speaking raw bytes, for driving the client or server by hand.
pub struct RawPeer {
    pub io: DuplexStream,
    buf: BytesMut,
    dec: Decoder,
}

impl RawPeer {
    pub fn new(io: DuplexStream) -> Self {
        RawPeer {
            io,
            buf: BytesMut::new(),
            dec: Decoder::new(),
        }
    }

    pub async fn send_raw(&mut self, b: &[u8]) {
        self.io.write_all(b).await.unwrap();
    }

    pub async fn send_request(&mut self, stream_id: u32, req: &Request) {
        let mut b = BytesMut::new();
        codec::encode_message(stream_id, MessageType::Request, 0, req, &mut b).unwrap();
        self.send_raw(&b).await;
    }

    pub async fn send_response(&mut self, stream_id: u32, resp: &Response) {
        let mut b = BytesMut::new();
        codec::encode_message(stream_id, MessageType::Response, 0, resp, &mut b).unwrap();
        self.send_raw(&b).await;
    }

    /// The next decoded frame or decoder error; `None` at end of stream.
    pub async fn recv(&mut self) -> Option<Result<Frame, Error>> {
        loop {
            match self.dec.decode(&mut self.buf) {
                Ok(Some(f)) => return Some(Ok(f)),
                Ok(None) => {}
                Err(e) => return Some(Err(e)),
            }
            self.buf.reserve(8192);
            if self.io.read_buf(&mut self.buf).await.unwrap() == 0 {
                return None;
            }
        }
    }

    /// The next frame, which must be a response; returns its stream id and envelope.
    pub async fn recv_response(&mut self) -> (u32, Response) {
        let f = self.recv().await.expect("eof").expect("frame");
        assert_eq!(f.message_type, MessageType::Response);
        (f.stream_id, Response::decode(f.payload).unwrap())
    }

    /// The next frame, which must be a request; returns its stream id and envelope.
    pub async fn recv_request(&mut self) -> (u32, Request) {
        let f = self.recv().await.expect("eof").expect("frame");
        assert_eq!(f.message_type, MessageType::Request);
        (f.stream_id, Request::decode(f.payload).unwrap())
    }
}

/// A request envelope for the test service.
pub fn request(method: &str, payload: &[u8]) -> Request {
    Request {
        service: SVC.into(),
        method: method.into(),
        payload: Bytes::copy_from_slice(payload),
        timeout_nano: 0,
        metadata: vec![],
    }
}

/// The status code of a response envelope (OK if absent).
pub fn code_of(resp: &Response) -> Code {
    resp.status.as_ref().map_or(Code::Ok, |s| s.code())
}
