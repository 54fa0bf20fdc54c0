//! Shared helpers of the wire-level interop tests and the wire benchmark:
//! the `nri.interop.v1.Echo` test service (the same one the Go
//! `nri-wire-peer` serves), its well-known-type messages, the payload
//! pattern, and locating the Go peers.
//!
//! Not published; only `tests/` and `src/bin/wire-bench/` use it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use nri_ttrpc::{Code, Methods, Status};

/// Fully qualified name of the test service, as `nri-wire-peer` registers it.
pub const ECHO_SERVICE: &str = "nri.interop.v1.Echo";

/// `google.protobuf.BytesValue`.
#[derive(Clone, PartialEq, prost::Message)]
pub struct BytesValue {
    /// Field 1.
    #[prost(bytes = "bytes", tag = "1")]
    pub value: Bytes,
}

/// `google.protobuf.UInt64Value`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct UInt64Value {
    /// Field 1.
    #[prost(uint64, tag = "1")]
    pub value: u64,
}

/// `google.protobuf.Int32Value`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Int32Value {
    /// Field 1.
    #[prost(int32, tag = "1")]
    pub value: i32,
}

/// `google.protobuf.Empty`.
#[derive(Clone, Copy, PartialEq, prost::Message)]
pub struct Empty {}

/// Requests handled by [`echo_service`], per method.
#[derive(Debug, Default)]
pub struct Served {
    /// `Echo` calls.
    pub echo: AtomicU64,
    /// `Sleep` calls.
    pub sleep: AtomicU64,
    /// `Fail` calls.
    pub fail: AtomicU64,
}

impl Served {
    /// `(echo, sleep, fail)` now.
    pub fn snapshot(&self) -> (u64, u64, u64) {
        (
            self.echo.load(Ordering::Relaxed),
            self.sleep.load(Ordering::Relaxed),
            self.fail.load(Ordering::Relaxed),
        )
    }
}

/// The `nri.interop.v1.Echo` service, with the behaviour of the Go peer:
///
/// * `Echo(BytesValue) -> BytesValue`, the same bytes;
/// * `Sleep(UInt64Value ms) -> Empty` after sleeping (the server answers
///   `DEADLINE_EXCEEDED` itself when the request's deadline passes first);
/// * `Fail(Int32Value code)`: a status with that code and message
///   `requested failure` (code 0 returns `Empty`);
/// * anything else: `UNIMPLEMENTED` (done by [`Methods`]).
pub fn echo_service(served: Arc<Served>) -> Methods {
    let s_echo = served.clone();
    let s_sleep = served.clone();
    let s_fail = served;
    Methods::new()
        .add("Echo", move |_ctx, payload: Bytes| {
            s_echo.echo.fetch_add(1, Ordering::Relaxed);
            // Decode and re-encode like a typed handler would.
            let res = <BytesValue as prost::Message>::decode(payload)
                .map(|m| Bytes::from(prost::Message::encode_to_vec(&m)))
                .map_err(|e| Status::new(Code::InvalidArgument, format!("decode: {e}")));
            std::future::ready(res)
        })
        .add_message("Sleep", move |_ctx, req: UInt64Value| {
            s_sleep.sleep.fetch_add(1, Ordering::Relaxed);
            async move {
                tokio::time::sleep(Duration::from_millis(req.value)).await;
                Ok::<_, Status>(Empty {})
            }
        })
        .add_message("Fail", move |_ctx, req: Int32Value| {
            s_fail.fail.fetch_add(1, Ordering::Relaxed);
            async move {
                if req.value == 0 {
                    Ok(Empty {})
                } else {
                    Err(Status::new(Code::from(req.value), "requested failure"))
                }
            }
        })
}

/// The payload pattern of `nri-wire-peer`: byte `i` of a payload for caller
/// `k` is `(i + 17*k) % 251`.
pub fn pattern(len: usize, k: usize) -> Bytes {
    let cycle: Vec<u8> = (0..251u32)
        .map(|i| u8::try_from(i).unwrap_or_default())
        .collect();
    let mut out = Vec::with_capacity(len + 251);
    let start = (17 * k) % 251;
    out.extend_from_slice(&cycle[start..]);
    while out.len() < len {
        out.extend_from_slice(&cycle);
    }
    out.truncate(len);
    Bytes::from(out)
}

// The directory of the Go interop binaries, and finding one of them under
// the `NRI_REQUIRE_INTEROP` rule: the workspace's shared test helpers.
pub use nri_test_support::go_peer;
pub use nri_test_support::interop::bin_dir as interop_bin_dir;
