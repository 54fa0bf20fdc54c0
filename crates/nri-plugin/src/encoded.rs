//! [`Encoded`]: a request kept as its wire bytes and decoded when, and as
//! far as, the plugin asks.

use std::fmt;
use std::marker::PhantomData;

use bytes::Bytes;
use nri_api::api::{Container, CreateContainerRequest, PodSandbox};
use prost::Message;
use prost::encoding::{DecodeContext, WireType, decode_key, decode_varint, skip_field};

use crate::Error;
use crate::limits::{RequestRefused, check_request};

/// Field number of `CreateContainerRequest.pod`, as in the NRI protocol's
/// `CreateContainerRequest` message.
const CREATE_CONTAINER_POD: u32 = 1;
/// Field number of `CreateContainerRequest.container`, as in the NRI
/// protocol's `CreateContainerRequest` message.
const CREATE_CONTAINER_CONTAINER: u32 = 2;

/// A request as the runtime sent it: the encoded message `M`, decoded only
/// when the plugin asks, and only the part it asks for.
///
/// Handed to [`Plugin::create_container_encoded`](crate::Plugin::create_container_encoded).
/// Holding it costs nothing beyond the bytes already received (no copy).
/// [`decode`](Encoded::decode) decodes the whole request;
/// for `CreateContainer`, [`pod`](Encoded::pod) and
/// [`container`](Encoded::container) decode one part and skip the other.
/// A plugin that decides from the container alone never pays for the pod,
/// and one that answers without looking never decodes at all: decoding is
/// most of what an event costs a plugin (about 60% of its CPU time
/// for the 4 KB requests of the benchmarks).
///
/// Every decode is checked first as the SDK checks the requests it decodes
/// itself (see [`DECODED_RATIO`](crate::DECODED_RATIO)): a part that would
/// decode to too much memory is refused with [`Error::RequestTooLarge`],
/// one that cannot be decoded gives [`Error::MalformedRequest`]. Both
/// convert into a [`HandlerError`](crate::HandlerError) with `?` that
/// answers `RESOURCE_EXHAUSTED` or `INVALID_ARGUMENT`, as the SDK answers
/// such a request to a plugin that decodes everything.
///
/// ```
/// use nri_plugin::Encoded;
/// use nri_plugin::api::{Container, CreateContainerRequest, PodSandbox};
///
/// # fn main() -> Result<(), nri_plugin::Error> {
/// let req = Encoded::from_message(&CreateContainerRequest {
///     pod: Some(PodSandbox { name: "web".into(), ..Default::default() }),
///     container: Some(Container { name: "nginx".into(), ..Default::default() }),
/// });
/// // Only the container is decoded.
/// assert_eq!(req.container()?.name, "nginx");
/// assert_eq!(req.decode()?.pod.unwrap_or_default().name, "web");
/// # Ok(())
/// # }
/// ```
pub struct Encoded<M> {
    bytes: Bytes,
    _message: PhantomData<fn() -> M>,
}

impl<M> Clone for Encoded<M> {
    fn clone(&self) -> Self {
        Encoded {
            bytes: self.bytes.clone(),
            _message: PhantomData,
        }
    }
}

impl<M: prost::Name> fmt::Debug for Encoded<M> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Encoded")
            .field("message", &M::NAME)
            .field("wire_len", &self.bytes.len())
            .finish()
    }
}

impl<M: Message + prost::Name + Default> Encoded<M> {
    /// Takes the encoded message `bytes` (no copy, nothing checked yet).
    pub fn new(bytes: Bytes) -> Self {
        Encoded {
            bytes,
            _message: PhantomData,
        }
    }

    /// Encodes `message`: for a plugin's tests, to call its handler with a
    /// request of their own.
    pub fn from_message(message: &M) -> Self {
        Self::new(Bytes::from(message.encode_to_vec()))
    }

    /// The request's wire bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Size of the encoded request in bytes.
    pub fn wire_len(&self) -> usize {
        self.bytes.len()
    }

    /// Decodes the whole request.
    ///
    /// Errors: [`Error::RequestTooLarge`] when it would decode to too much
    /// memory (it is not decoded), [`Error::MalformedRequest`] when it
    /// cannot be decoded.
    pub fn decode(&self) -> Result<M, Error> {
        check_request::<M>(&self.bytes, &[]).map_err(refused::<M>)?;
        M::decode(&*self.bytes).map_err(|e| malformed::<M>(0, e))
    }
}

impl Encoded<CreateContainerRequest> {
    /// Decodes the request's pod only (the default pod when the request
    /// has none). Errors as for [`decode`](Encoded::decode).
    pub fn pod(&self) -> Result<PodSandbox, Error> {
        self.field(CREATE_CONTAINER_POD)
    }

    /// Decodes the request's container only (the default container when
    /// the request has none). Errors as for [`decode`](Encoded::decode).
    pub fn container(&self) -> Result<Container, Error> {
        self.field(CREATE_CONTAINER_CONTAINER)
    }
}

impl<M: Message + prost::Name + Default> Encoded<M> {
    /// Decodes the top-level message field `number` of the request as a
    /// `T`, skipping the other fields. A field that occurs more than once
    /// is merged, as protobuf decoding merges it.
    fn field<T: Message + prost::Name + Default>(&self, number: u32) -> Result<T, Error> {
        let whole = self.bytes.len();
        let mut buf: &[u8] = &self.bytes;
        let mut value = T::default();
        while !buf.is_empty() {
            let offset = whole - buf.len();
            let (tag, wire) = decode_key(&mut buf).map_err(|e| malformed::<M>(offset, e))?;
            if tag != number {
                skip_field(wire, tag, &mut buf, DecodeContext::default())
                    .map_err(|e| malformed::<M>(offset, e))?;
                continue;
            }
            if wire != WireType::LengthDelimited {
                let reason = format!("field {number} has wire type {wire:?}, not a message");
                return Err(refused::<M>(RequestRefused::malformed(reason)));
            }
            let len = decode_varint(&mut buf).map_err(|e| malformed::<M>(offset, e))?;
            let part = usize::try_from(len)
                .ok()
                .and_then(|len| buf.get(..len))
                .ok_or_else(|| {
                    let reason = format!("field {number} at byte {offset} overruns the request");
                    refused::<M>(RequestRefused::malformed(reason))
                })?;
            check_request::<T>(part, &[]).map_err(refused::<T>)?;
            value
                .merge(part)
                .map_err(|e| malformed::<T>(whole - buf.len(), e))?;
            buf = &buf[part.len()..];
        }
        Ok(value)
    }
}

/// The error of a request of type `M` that [`check_request`] refused.
fn refused<M: prost::Name>(r: RequestRefused) -> Error {
    tracing::warn!(request = M::NAME, reason = %r.reason, "nri-plugin: refusing a request before decoding it");
    if r.malformed {
        Error::MalformedRequest {
            message: M::NAME,
            reason: r.reason,
            source: None,
        }
    } else {
        Error::RequestTooLarge {
            message: M::NAME,
            reason: r.reason,
        }
    }
}

/// The error of a request of type `M` that prost could not decode; `offset`
/// is where in the request the part that failed starts.
fn malformed<M: prost::Name>(offset: usize, e: prost::DecodeError) -> Error {
    Error::MalformedRequest {
        message: M::NAME,
        reason: format!("cannot decode the part at byte {offset}"),
        source: Some(e),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use nri_api::api::Mount;

    use super::*;

    fn request() -> CreateContainerRequest {
        CreateContainerRequest {
            pod: Some(PodSandbox {
                id: "pod-1".into(),
                name: "web".into(),
                ..Default::default()
            }),
            container: Some(Container {
                id: "ctr-1".into(),
                name: "nginx".into(),
                args: vec!["nginx".into(), "-g".into()],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn each_part_decodes_to_what_the_whole_decode_gives() {
        let req = request();
        let enc = Encoded::from_message(&req);
        assert_eq!(enc.decode().unwrap(), req);
        assert_eq!(Some(enc.pod().unwrap()), req.pod);
        assert_eq!(Some(enc.container().unwrap()), req.container);
        assert_eq!(enc.wire_len(), req.encoded_len());
    }

    #[test]
    fn a_missing_part_is_the_default() {
        let enc = Encoded::from_message(&CreateContainerRequest::default());
        assert_eq!(enc.pod().unwrap(), PodSandbox::default());
        assert_eq!(enc.container().unwrap(), Container::default());
    }

    #[test]
    fn a_part_sent_twice_is_merged_as_protobuf_merges_it() {
        // The container twice: the second's scalars win, lists append.
        let first = CreateContainerRequest {
            container: Some(Container {
                id: "a".into(),
                args: vec!["x".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let second = CreateContainerRequest {
            container: Some(Container {
                name: "b".into(),
                args: vec!["y".into()],
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut bytes = first.encode_to_vec();
        bytes.extend(second.encode_to_vec());
        let whole = CreateContainerRequest::decode(&bytes[..]).unwrap();
        let enc = Encoded::<CreateContainerRequest>::new(bytes.into());
        assert_eq!(Some(enc.container().unwrap()), whole.container);
        assert_eq!(enc.container().unwrap().args, ["x", "y"]);
    }

    #[test]
    fn unknown_fields_are_skipped() {
        let mut bytes = request().encode_to_vec();
        // Field 9, varint 5: not in the message.
        bytes.extend([9 << 3, 5]);
        let enc = Encoded::<CreateContainerRequest>::new(bytes.into());
        assert_eq!(enc.container().unwrap().name, "nginx");
        assert_eq!(enc.pod().unwrap().name, "web");
    }

    #[test]
    fn a_part_that_overruns_the_request_is_malformed() {
        let mut bytes = request().encode_to_vec();
        bytes.truncate(bytes.len() - 3);
        let enc = Encoded::<CreateContainerRequest>::new(bytes.into());
        assert!(matches!(
            enc.container().unwrap_err(),
            Error::MalformedRequest { .. }
        ));
        assert!(matches!(
            enc.decode().unwrap_err(),
            Error::MalformedRequest { .. }
        ));
        // The pod comes first and is whole, but the request is not: a later
        // occurrence of the pod could be in what cannot be read.
        assert!(matches!(
            enc.pod().unwrap_err(),
            Error::MalformedRequest { .. }
        ));
    }

    #[test]
    fn a_part_of_the_wrong_wire_type_is_malformed() {
        // Field 2 as a varint.
        let enc = Encoded::<CreateContainerRequest>::new(Bytes::from_static(&[2 << 3, 1]));
        let err = enc.container().unwrap_err();
        assert!(err.to_string().contains("wire type"), "{err}");
        assert!(matches!(err, Error::MalformedRequest { .. }));
    }

    #[test]
    fn a_part_of_empty_entries_is_refused_before_decoding() {
        let req = CreateContainerRequest {
            container: Some(Container {
                mounts: vec![Mount::default(); 100_000],
                ..Default::default()
            }),
            ..Default::default()
        };
        let enc = Encoded::from_message(&req);
        let err = enc.container().unwrap_err();
        assert!(
            matches!(
                err,
                Error::RequestTooLarge {
                    message: "Container",
                    ..
                }
            ),
            "{err}"
        );
        assert!(matches!(
            enc.decode().unwrap_err(),
            Error::RequestTooLarge {
                message: "CreateContainerRequest",
                ..
            }
        ));
        // The pod is small and decodes.
        assert_eq!(enc.pod().unwrap(), PodSandbox::default());
    }
}
