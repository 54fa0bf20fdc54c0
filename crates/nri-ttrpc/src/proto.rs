//! The ttRPC envelope messages and status codes.
//!
//! These mirror the protobuf messages of package `ttrpc` (`Request`,
//! `Response`, `KeyValue`) and of `google.rpc` (`Status`), plus
//! `google.protobuf.Any`. They are written by hand (with `prost` derives)
//! because they are tiny; field numbers and types are the wire contract.

use std::fmt;

use bytes::Bytes;

/// A ttRPC request envelope (protobuf `ttrpc.Request`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Request {
    /// Fully qualified service name (field 1), e.g. `nri.pkg.api.v1alpha1.Plugin`.
    #[prost(string, tag = "1")]
    pub service: String,
    /// Bare method name (field 2), e.g. `Configure`.
    #[prost(string, tag = "2")]
    pub method: String,
    /// The encoded request message (field 3).
    #[prost(bytes = "bytes", tag = "3")]
    pub payload: Bytes,
    /// Time the caller is willing to wait, in nanoseconds (field 4); 0 means
    /// no deadline.
    #[prost(int64, tag = "4")]
    pub timeout_nano: i64,
    /// Request metadata (field 5); keys may repeat.
    #[prost(message, repeated, tag = "5")]
    pub metadata: Vec<KeyValue>,
}

/// One metadata entry (protobuf `ttrpc.KeyValue`).
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct KeyValue {
    /// Key (field 1).
    #[prost(string, tag = "1")]
    pub key: String,
    /// Value (field 2).
    #[prost(string, tag = "2")]
    pub value: String,
}

impl KeyValue {
    /// Builds a metadata entry.
    pub fn new(key: impl Into<String>, value: impl Into<String>) -> Self {
        Self {
            key: key.into(),
            value: value.into(),
        }
    }
}

/// A ttRPC response envelope (protobuf `ttrpc.Response`).
#[derive(Clone, PartialEq, prost::Message)]
pub struct Response {
    /// Outcome of the call (field 1). Absent or code 0 means success.
    #[prost(message, optional, tag = "1")]
    pub status: Option<Status>,
    /// The encoded response message (field 2).
    #[prost(bytes = "bytes", tag = "2")]
    pub payload: Bytes,
}

/// A call status (protobuf `google.rpc.Status`).
///
/// Service handlers return it as their error type; it also travels in
/// [`Response::status`].
#[derive(Clone, PartialEq, prost::Message)]
pub struct Status {
    /// The raw status code (field 1); see [`Status::code`] for the typed view.
    #[prost(int32, tag = "1")]
    pub code: i32,
    /// Human readable message (field 2).
    #[prost(string, tag = "2")]
    pub message: String,
    /// Optional structured details (field 3).
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<Any>,
}

impl Status {
    /// Builds a status with `code` and `message` and no details.
    pub fn new(code: Code, message: impl Into<String>) -> Self {
        Self {
            code: code.into(),
            message: message.into(),
            details: Vec::new(),
        }
    }

    /// The success status (code 0, empty message).
    pub fn ok() -> Self {
        Self::new(Code::Ok, "")
    }

    /// The typed status code.
    pub fn code(&self) -> Code {
        Code::from(self.code)
    }

    /// Whether this status means success.
    pub fn is_ok(&self) -> bool {
        self.code == 0
    }

    /// `UNIMPLEMENTED` for an unknown service, worded as the Go server does.
    pub fn unknown_service(service: &str) -> Self {
        Self::new(Code::Unimplemented, format!("service {service}"))
    }

    /// `UNIMPLEMENTED` for an unknown method, worded as the Go server does.
    pub fn unknown_method(method: &str) -> Self {
        Self::new(Code::Unimplemented, format!("method {method}"))
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.code(), self.message)
    }
}

impl std::error::Error for Status {}

/// A minimal `google.protobuf.Any`, used only for [`Status::details`].
#[derive(Clone, PartialEq, Eq, Hash, prost::Message)]
pub struct Any {
    /// Type URL of the packed message (field 1).
    #[prost(string, tag = "1")]
    pub type_url: String,
    /// The packed message (field 2).
    #[prost(bytes = "bytes", tag = "2")]
    pub value: Bytes,
}

/// gRPC status codes, as used by ttRPC (`google.golang.org/grpc/codes`).
///
/// Conversion from `i32` is lossless: values outside `0..=16` become
/// [`Code::Other`] and convert back to the same number. `Other` never holds
/// a value in `0..=16`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// 0: success.
    Ok,
    /// 1: the operation was cancelled.
    Cancelled,
    /// 2: unknown error.
    Unknown,
    /// 3: the client sent an invalid argument.
    InvalidArgument,
    /// 4: the deadline expired before the operation completed.
    DeadlineExceeded,
    /// 5: an entity was not found.
    NotFound,
    /// 6: an entity already exists.
    AlreadyExists,
    /// 7: the caller lacks permission.
    PermissionDenied,
    /// 8: a resource (e.g. message size) has been exhausted.
    ResourceExhausted,
    /// 9: the system is not in a state required for the operation.
    FailedPrecondition,
    /// 10: the operation was aborted.
    Aborted,
    /// 11: the operation was attempted past the valid range.
    OutOfRange,
    /// 12: the operation (service or method) is not implemented.
    Unimplemented,
    /// 13: internal error.
    Internal,
    /// 14: the service is unavailable.
    Unavailable,
    /// 15: unrecoverable data loss or corruption.
    DataLoss,
    /// 16: the request lacks valid authentication.
    Unauthenticated,
    /// Any other value, kept as received (never in `0..=16`).
    Other(i32),
}

impl From<i32> for Code {
    fn from(v: i32) -> Self {
        match v {
            0 => Code::Ok,
            1 => Code::Cancelled,
            2 => Code::Unknown,
            3 => Code::InvalidArgument,
            4 => Code::DeadlineExceeded,
            5 => Code::NotFound,
            6 => Code::AlreadyExists,
            7 => Code::PermissionDenied,
            8 => Code::ResourceExhausted,
            9 => Code::FailedPrecondition,
            10 => Code::Aborted,
            11 => Code::OutOfRange,
            12 => Code::Unimplemented,
            13 => Code::Internal,
            14 => Code::Unavailable,
            15 => Code::DataLoss,
            16 => Code::Unauthenticated,
            other => Code::Other(other),
        }
    }
}

impl From<Code> for i32 {
    fn from(c: Code) -> i32 {
        match c {
            Code::Ok => 0,
            Code::Cancelled => 1,
            Code::Unknown => 2,
            Code::InvalidArgument => 3,
            Code::DeadlineExceeded => 4,
            Code::NotFound => 5,
            Code::AlreadyExists => 6,
            Code::PermissionDenied => 7,
            Code::ResourceExhausted => 8,
            Code::FailedPrecondition => 9,
            Code::Aborted => 10,
            Code::OutOfRange => 11,
            Code::Unimplemented => 12,
            Code::Internal => 13,
            Code::Unavailable => 14,
            Code::DataLoss => 15,
            Code::Unauthenticated => 16,
            Code::Other(v) => v,
        }
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let name = match self {
            Code::Ok => "OK",
            Code::Cancelled => "Canceled",
            Code::Unknown => "Unknown",
            Code::InvalidArgument => "InvalidArgument",
            Code::DeadlineExceeded => "DeadlineExceeded",
            Code::NotFound => "NotFound",
            Code::AlreadyExists => "AlreadyExists",
            Code::PermissionDenied => "PermissionDenied",
            Code::ResourceExhausted => "ResourceExhausted",
            Code::FailedPrecondition => "FailedPrecondition",
            Code::Aborted => "Aborted",
            Code::OutOfRange => "OutOfRange",
            Code::Unimplemented => "Unimplemented",
            Code::Internal => "Internal",
            Code::Unavailable => "Unavailable",
            Code::DataLoss => "DataLoss",
            Code::Unauthenticated => "Unauthenticated",
            Code::Other(v) => return write!(f, "Code({v})"),
        };
        f.write_str(name)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use super::*;
    use prost::Message;

    #[test]
    fn code_roundtrip_is_lossless() {
        for v in [-5, -1, 0, 1, 8, 12, 16, 17, 99, i32::MIN, i32::MAX] {
            assert_eq!(i32::from(Code::from(v)), v);
        }
        assert_eq!(Code::from(12), Code::Unimplemented);
        assert_eq!(Code::from(17), Code::Other(17));
    }

    /// Captured bytes: `ttrpc.Request{service:"svc", method:"M", payload:"\x01",
    /// timeout_nano:2, metadata:[{k,v}]}` as proto3 encodes it.
    #[test]
    fn request_bytes() {
        let req = Request {
            service: "svc".into(),
            method: "M".into(),
            payload: Bytes::from_static(&[1]),
            timeout_nano: 2,
            metadata: vec![KeyValue::new("k", "v")],
        };
        let want: &[u8] = &[
            0x0a, 3, b's', b'v', b'c', // service
            0x12, 1, b'M', // method
            0x1a, 1, 1, // payload
            0x20, 2, // timeout_nano
            0x2a, 6, 0x0a, 1, b'k', 0x12, 1, b'v', // metadata
        ];
        assert_eq!(req.encode_to_vec(), want);
        assert_eq!(Request::decode(want).unwrap(), req);
    }

    /// Captured bytes: a response with an OK status as Go sends it (an empty
    /// `status` submessage), and one with code 12 and a message.
    #[test]
    fn response_bytes() {
        let ok = Response {
            status: Some(Status::ok()),
            payload: Bytes::from_static(b"x"),
        };
        assert_eq!(ok.encode_to_vec(), [0x0a, 0, 0x12, 1, b'x']);
        let unimpl = Response {
            status: Some(Status::new(Code::Unimplemented, "m")),
            payload: Bytes::new(),
        };
        assert_eq!(unimpl.encode_to_vec(), [0x0a, 5, 0x08, 12, 0x12, 1, b'm']);
    }
}
