//! A look at an encoded message before it is decoded: how many entries
//! its repeated fields hold and how much memory decoding it would take.
//!
//! Decoding is where a hostile peer's bytes turn into memory: an empty
//! `ContainerUpdate` is 2 bytes on the wire and a 400-byte struct once
//! decoded, an empty `Container` 2 bytes and 1.4 KB. A receiver that wants
//! to bound what one message may cost calls [`scan`] on the bytes first
//! and decodes only when the [`Scan`] is within its limits:
//!
//! ```
//! use nri_api::api::{ContainerUpdate, UpdateContainersRequest};
//! use prost::Message;
//!
//! let req = UpdateContainersRequest {
//!     update: vec![ContainerUpdate::default(); 1000],
//!     evict: Vec::new(),
//! };
//! let bytes = req.encode_to_vec();
//! let scan = nri_api::scan::scan::<UpdateContainersRequest>(&bytes)?;
//! assert_eq!(bytes.len(), 2000);
//! assert_eq!(scan.count("update"), 1000);
//! // 1000 structs of 400 bytes from 2000 bytes of input.
//! assert!(scan.decoded_size() > 100 * scan.wire_len());
//! # Ok::<(), nri_api::Error>(())
//! ```
//!
//! The scanner walks the message along the schema's shape of it (a table
//! generated from the schema by `cargo xtask codegen`) without allocating,
//! and checks what prost's decoding checks (field keys, wire types of known
//! fields, lengths, UTF-8 of strings, nesting depth), so a message it
//! accepts decodes and a message it refuses would not.
//!
//! The size it reports ([`Scan::decoded_size`]) is the size of the decoded
//! message's struct plus what decoding it allocates: each vector at the
//! capacity it grows to as prost pushes its entries, each string's bytes,
//! each map's tree nodes as they fill when built in key order. A field
//! repeated where one value is expected is counted each time, so the
//! estimate errs high for such input. Measured against the allocations of
//! prost's decoding of random messages (the crate's `scan` tests), what
//! decoding allocated was between 0.3 and 1.14 times the estimate.

use prost::encoding::{WireType, decode_key, decode_varint};

use crate::error::Error;
use crate::messages::MESSAGE_COUNT;

/// Nesting allowed below the top-level message, as prost's decoder allows
/// (its default recursion limit).
const RECURSION_LIMIT: u32 = 100;

/// Most fields a message of the schema has (checked by a test), the size
/// of the per-field counters of a [`Scan`].
const MAX_FIELDS: usize = 32;

/// How a field is encoded and what it decodes to.
///
/// The schema has no fixed-size numbers and no bytes fields today; the
/// scanner handles them anyway, so a schema change needs no change here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[allow(dead_code)]
pub(crate) enum Kind {
    /// A varint number decoded to a value of this many bytes.
    Varint(usize),
    /// A 4-byte number.
    Fixed32,
    /// An 8-byte number.
    Fixed64,
    /// A UTF-8 string.
    String,
    /// Bytes.
    Bytes,
    /// The message at this index of the schema.
    Message(usize),
    /// A map from the first kind to the second.
    Map(&'static Kind, &'static Kind),
}

/// One field of a message.
#[derive(Debug)]
pub(crate) struct FieldShape {
    pub(crate) number: u32,
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    /// A `repeated` field (maps are not: their kind says it).
    pub(crate) repeated: bool,
}

/// One message of the schema.
#[derive(Debug)]
pub(crate) struct MessageShape {
    pub(crate) name: &'static str,
    /// Sorted by number.
    pub(crate) fields: &'static [FieldShape],
}

/// Every message of the schema, in schema order.
pub(crate) static SHAPES: [MessageShape; MESSAGE_COUNT] = include!("generated/scan_schema.rs");

macro_rules! struct_sizes {
    ($($ty:path),* $(,)?) => {
        [$(::core::mem::size_of::<$ty>()),*]
    };
}

/// Size of the Rust struct of every message, in schema order.
pub(crate) const SIZES: [usize; MESSAGE_COUNT] = crate::for_each_message!(struct_sizes);

/// What [`scan`] found out about one encoded message.
#[derive(Debug, Clone, Copy)]
pub struct Scan {
    shape: &'static MessageShape,
    wire_len: usize,
    decoded_size: usize,
    /// Entries of each top-level field, by position in `shape.fields`.
    counts: [usize; MAX_FIELDS],
}

impl Scan {
    /// Protobuf name of the message (e.g. `UpdateContainersRequest`).
    pub fn message(&self) -> &'static str {
        self.shape.name
    }

    /// Length of the encoded message.
    pub fn wire_len(&self) -> usize {
        self.wire_len
    }

    /// Estimated memory of the decoded message (see the module docs): its
    /// struct and everything it holds on the heap.
    pub fn decoded_size(&self) -> usize {
        self.decoded_size
    }

    /// Entries of the top-level repeated or map field `field` (its
    /// protobuf name, e.g. `update`); 0 for a field that is not repeated
    /// or not in the message.
    pub fn count(&self, field: &str) -> usize {
        self.position(field)
            .and_then(|i| self.counts.get(i))
            .copied()
            .unwrap_or(0)
    }

    /// [`decoded_size`](Self::decoded_size) less the vectors holding the
    /// entries of the top-level repeated message `fields` (what the
    /// entries hold beyond their own struct stays counted): for a receiver
    /// that caps those entries by number and the rest by size.
    pub fn decoded_size_beyond(&self, fields: &[&str]) -> usize {
        let mut size = self.decoded_size;
        for name in fields {
            let Some(i) = self.position(name) else {
                continue;
            };
            let (Some(f), Some(n)) = (self.shape.fields.get(i), self.counts.get(i)) else {
                continue;
            };
            if let (true, Kind::Message(m)) = (f.repeated, f.kind) {
                let each = SIZES.get(m).copied().unwrap_or(0);
                size = size.saturating_sub(vec_bytes(*n, each));
            }
        }
        size
    }

    fn position(&self, field: &str) -> Option<usize> {
        self.shape.fields.iter().position(|f| f.name == field)
    }
}

/// Scans the encoded message `bytes` of type `M` (a message of this
/// crate's [`api`](crate::api)) without decoding it.
///
/// Errors: [`Error::MalformedMessage`] where prost's decoding would fail
/// (with where and why), [`Error::NotInSchema`] when `M` is not a message
/// of the schema.
pub fn scan<M: prost::Name>(bytes: &[u8]) -> Result<Scan, Error> {
    let Some(index) = SHAPES.iter().position(|s| s.name == M::NAME) else {
        return Err(Error::NotInSchema { message: M::NAME });
    };
    let shape = &SHAPES[index];
    let mut walk = Walk {
        message: shape.name,
        whole: bytes.len(),
        counts: [0; MAX_FIELDS],
    };
    let heap = walk
        .message(index, bytes, RECURSION_LIMIT, true)
        .map_err(|e| *e)?;
    Ok(Scan {
        shape,
        wire_len: bytes.len(),
        decoded_size: SIZES[index].saturating_add(heap),
        counts: walk.counts,
    })
}

/// Counts the entries of the top-level repeated or map field `field` (its
/// protobuf name) of the encoded message `bytes` of type `M`, and stops
/// once more than `stop` were counted: a quick first look for a receiver
/// that caps `field` by number, so that refusing a message of millions of
/// entries costs a few entries' worth of work, not the whole message.
/// Other top-level fields are skipped by their length, not walked; the
/// entries counted are checked as [`scan`] checks them. Returns 0 for a
/// field that is not in `M`; a result over `stop` means "at least that
/// many".
///
/// Errors: as for [`scan`], for the part of the message looked at.
pub fn count_at_most<M: prost::Name>(
    bytes: &[u8],
    field: &str,
    stop: usize,
) -> Result<usize, Error> {
    let Some(shape) = SHAPES.iter().find(|s| s.name == M::NAME) else {
        return Err(Error::NotInSchema { message: M::NAME });
    };
    let Some(f) = shape.fields.iter().find(|f| f.name == field) else {
        return Ok(0);
    };
    let mut walk = Walk {
        message: shape.name,
        whole: bytes.len(),
        counts: [0; MAX_FIELDS],
    };
    walk.count(f, bytes, stop).map_err(|e| *e)
}

/// The state of one scan.
struct Walk {
    /// The top-level message, for errors.
    message: &'static str,
    /// Length of the whole input, to turn what is left into offsets.
    whole: usize,
    counts: [usize; MAX_FIELDS],
}

/// A step of a walk. The error is boxed so that a step's result is two
/// words (returned in registers): errors are rare, steps are many.
type Step<T> = Result<T, Box<Error>>;

impl Walk {
    #[cold]
    fn fail(&self, rest: &[u8], reason: impl std::fmt::Display) -> Box<Error> {
        Box::new(Error::MalformedMessage {
            message: self.message,
            offset: self.whole.saturating_sub(rest.len()),
            reason: reason.to_string(),
        })
    }

    /// The entries of the top-level field `f` in `buf`, counted until more
    /// than `stop` (see [`count_at_most`]); other fields are skipped.
    fn count(&mut self, f: &FieldShape, mut buf: &[u8], stop: usize) -> Step<usize> {
        let mut n = 0usize;
        while !buf.is_empty() && n <= stop {
            let (tag, wire) = decode_key(&mut buf).map_err(|e| self.fail(buf, e))?;
            if tag == f.number {
                let (_, entries) = self.field(f, wire, &mut buf, RECURSION_LIMIT)?;
                n = n.saturating_add(entries);
            } else {
                self.skip(wire, tag, &mut buf, RECURSION_LIMIT)?;
            }
        }
        Ok(n)
    }

    /// The heap bytes of message `index` encoded in `buf`, whose fields may
    /// nest `budget` more levels. `top` keeps its fields' entry counts.
    fn message(&mut self, index: usize, mut buf: &[u8], budget: u32, top: bool) -> Step<usize> {
        let Some(shape) = SHAPES.get(index) else {
            return Err(self.fail(buf, "message missing from the schema table"));
        };
        let mut heap = 0usize;
        let mut entries = [0usize; MAX_FIELDS];
        while !buf.is_empty() {
            let (tag, wire) = decode_key(&mut buf).map_err(|e| self.fail(buf, e))?;
            let Some(pos) = field_position(shape.fields, tag) else {
                self.skip(wire, tag, &mut buf, budget)?;
                continue;
            };
            let field = &shape.fields[pos];
            let (bytes, n) = self.field(field, wire, &mut buf, budget)?;
            heap = heap.saturating_add(bytes);
            if let Some(c) = entries.get_mut(pos) {
                *c = c.saturating_add(n);
            }
        }
        // The vectors and maps holding the entries.
        for (f, n) in shape.fields.iter().zip(entries) {
            heap = heap.saturating_add(match f.kind {
                Kind::Map(key, value) => map_bytes(n, value_size(key) + value_size(value)),
                kind if f.repeated => vec_bytes(n, value_size(&kind)),
                _ => 0,
            });
        }
        if top {
            self.counts = entries;
        }
        Ok(heap)
    }

    /// One occurrence of a known field: the heap bytes its values hold
    /// (beyond their place in a vector or map) and the entries it adds to
    /// a repeated or map field.
    fn field(
        &mut self,
        f: &FieldShape,
        wire: WireType,
        buf: &mut &[u8],
        budget: u32,
    ) -> Step<(usize, usize)> {
        match (f.kind, f.repeated) {
            (Kind::Map(key, value), _) => {
                // As prost: a map entry's wire type is not checked.
                let entry = self.delimited(buf)?;
                Ok((self.map_entry(key, value, entry, budget)?, 1))
            }
            (Kind::Varint(_) | Kind::Fixed32 | Kind::Fixed64, true)
                if wire == WireType::LengthDelimited =>
            {
                let packed = self.delimited(buf)?;
                Ok((0, self.packed(f.kind, packed)?))
            }
            (kind, true) => Ok((self.single(kind, wire, buf, budget)?, 1)),
            (kind, false) => Ok((self.single(kind, wire, buf, budget)?, 0)),
        }
    }

    /// One value of `kind`: the heap bytes it holds beyond its own size.
    fn single(&mut self, kind: Kind, wire: WireType, buf: &mut &[u8], budget: u32) -> Step<usize> {
        let expected = match kind {
            Kind::Varint(_) => WireType::Varint,
            Kind::Fixed32 => WireType::ThirtyTwoBit,
            Kind::Fixed64 => WireType::SixtyFourBit,
            Kind::String | Kind::Bytes | Kind::Message(_) | Kind::Map(..) => {
                WireType::LengthDelimited
            }
        };
        if wire != expected {
            return Err(self.fail(
                buf,
                format_args!("wire type {wire:?} where {expected:?} was expected"),
            ));
        }
        match kind {
            Kind::Varint(_) => {
                decode_varint(buf).map_err(|e| self.fail(buf, e))?;
                Ok(0)
            }
            Kind::Fixed32 => self.advance(buf, 4).map(|()| 0),
            Kind::Fixed64 => self.advance(buf, 8).map(|()| 0),
            Kind::String => {
                let s = self.delimited(buf)?;
                // ASCII (the usual case) is valid UTF-8 and quicker to check.
                if !s.is_ascii() && std::str::from_utf8(s).is_err() {
                    return Err(self.fail(buf, "a string is not valid UTF-8"));
                }
                Ok(s.len())
            }
            Kind::Bytes => Ok(self.delimited(buf)?.len()),
            Kind::Message(index) => {
                if budget == 0 {
                    return Err(self.fail(buf, "messages nested too deeply"));
                }
                let sub = self.delimited(buf)?;
                self.message(index, sub, budget - 1, false)
            }
            Kind::Map(key, value) => {
                // A map is never a map's key or value; a lone entry.
                let entry = self.delimited(buf)?;
                let held = self.map_entry(key, value, entry, budget)?;
                Ok(held.saturating_add(map_bytes(1, value_size(key) + value_size(value))))
            }
        }
    }

    /// The heap bytes of one map entry's key and value.
    fn map_entry(
        &mut self,
        key: &Kind,
        value: &Kind,
        mut entry: &[u8],
        budget: u32,
    ) -> Step<usize> {
        if budget == 0 {
            return Err(self.fail(entry, "messages nested too deeply"));
        }
        let mut held = 0usize;
        while !entry.is_empty() {
            let (tag, wire) = decode_key(&mut entry).map_err(|e| self.fail(entry, e))?;
            let bytes = match tag {
                1 => self.single(*key, wire, &mut entry, budget - 1)?,
                2 => self.single(*value, wire, &mut entry, budget - 1)?,
                _ => {
                    self.skip(wire, tag, &mut entry, budget - 1)?;
                    0
                }
            };
            held = held.saturating_add(bytes);
        }
        Ok(held)
    }

    /// The number of values of a packed repeated number field.
    fn packed(&self, kind: Kind, mut packed: &[u8]) -> Step<usize> {
        let mut n = 0usize;
        while !packed.is_empty() {
            match kind {
                Kind::Fixed32 => self.advance(&mut packed, 4)?,
                Kind::Fixed64 => self.advance(&mut packed, 8)?,
                _ => {
                    decode_varint(&mut packed).map_err(|e| self.fail(packed, e))?;
                }
            }
            n += 1;
        }
        Ok(n)
    }

    /// Takes a length-delimited value off `buf`.
    fn delimited<'b>(&self, buf: &mut &'b [u8]) -> Step<&'b [u8]> {
        let len = decode_varint(buf).map_err(|e| self.fail(buf, e))?;
        let len = usize::try_from(len).unwrap_or(usize::MAX);
        let Some((value, rest)) = buf.split_at_checked(len) else {
            return Err(self.fail(
                buf,
                format_args!("a length of {len} runs past the end ({} left)", buf.len()),
            ));
        };
        *buf = rest;
        Ok(value)
    }

    fn advance(&self, buf: &mut &[u8], n: usize) -> Step<()> {
        match buf.get(n..) {
            Some(rest) => {
                *buf = rest;
                Ok(())
            }
            None => Err(self.fail(buf, "a fixed-size number runs past the end")),
        }
    }

    /// Skips a field the schema does not know, as prost does (groups
    /// included, each level of a group counting toward the nesting limit).
    fn skip(&self, wire: WireType, tag: u32, buf: &mut &[u8], budget: u32) -> Step<()> {
        if budget == 0 {
            return Err(self.fail(buf, "messages nested too deeply"));
        }
        match wire {
            WireType::Varint => decode_varint(buf)
                .map(|_| ())
                .map_err(|e| self.fail(buf, e)),
            WireType::ThirtyTwoBit => self.advance(buf, 4),
            WireType::SixtyFourBit => self.advance(buf, 8),
            WireType::LengthDelimited => self.delimited(buf).map(|_| ()),
            WireType::StartGroup => loop {
                let (inner, inner_wire) = decode_key(buf).map_err(|e| self.fail(buf, e))?;
                if inner_wire == WireType::EndGroup {
                    if inner != tag {
                        return Err(self.fail(buf, "a group ends with another field's tag"));
                    }
                    return Ok(());
                }
                self.skip(inner_wire, inner, buf, budget - 1)?;
            },
            WireType::EndGroup => Err(self.fail(buf, "a group ends that never started")),
        }
    }
}

/// Where the field numbered `tag` is in `fields` (sorted by number). Most
/// messages number their fields 1, 2, 3...: the field numbered `tag` is
/// then at `tag - 1`, found without a search.
fn field_position(fields: &[FieldShape], tag: u32) -> Option<usize> {
    let guess = usize::try_from(tag).ok()?.checked_sub(1)?;
    match fields.get(guess) {
        Some(f) if f.number == tag => Some(guess),
        _ => fields.binary_search_by_key(&tag, |f| f.number).ok(),
    }
}

/// The bytes a vector of `n` values of `size` bytes allocates when they
/// are pushed one by one (as prost decodes them): capacity doubles from 4
/// (from 8 for 1-byte values, 1 for values over 1 KiB), as std's `Vec`
/// grows.
fn vec_bytes(n: usize, size: usize) -> usize {
    if n == 0 || size == 0 {
        return 0;
    }
    let min = match size {
        1 => 8,
        2..=1024 => 4,
        _ => 1,
    };
    n.checked_next_power_of_two()
        .unwrap_or(usize::MAX)
        .max(min)
        .saturating_mul(size)
}

/// Entries per `BTreeMap` node (std's B-tree capacity).
const MAP_NODE_CAPACITY: usize = 11;
/// Entries a node keeps when filled in key order: std splits a full node
/// so that the left one keeps this many.
const MAP_NODE_FILL: usize = 6;

/// The bytes a `BTreeMap` of `n` entries of `entry` bytes (key and value)
/// allocates when built in key order (as prost decodes an encoded map):
/// nodes of [`MAP_NODE_CAPACITY`] entries, filled to [`MAP_NODE_FILL`],
/// with the internal nodes above them.
fn map_bytes(n: usize, entry: usize) -> usize {
    if n == 0 {
        return 0;
    }
    // Parent pointer, index in the parent, length.
    let leaf = MAP_NODE_CAPACITY * entry + 16;
    // Plus one child pointer per entry and one more.
    let internal = leaf + (MAP_NODE_CAPACITY + 1) * size_of::<usize>();
    let leaves = if n <= MAP_NODE_CAPACITY {
        1
    } else {
        n.div_ceil(MAP_NODE_FILL)
    };
    let internals = if leaves > 1 {
        leaves.div_ceil(MAP_NODE_FILL)
    } else {
        0
    };
    leaves
        .saturating_mul(leaf)
        .saturating_add(internals.saturating_mul(internal))
}

/// The size of one decoded value of `kind` (in a vector or a map).
fn value_size(kind: &Kind) -> usize {
    match kind {
        Kind::Varint(n) => *n,
        Kind::Fixed32 => 4,
        Kind::Fixed64 => 8,
        Kind::String => size_of::<String>(),
        Kind::Bytes => size_of::<Vec<u8>>(),
        Kind::Message(i) => SIZES.get(*i).copied().unwrap_or(0),
        Kind::Map(..) => size_of::<std::collections::BTreeMap<String, String>>(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    macro_rules! names {
        ($($ty:path),* $(,)?) => {
            [$(<$ty as prost::Name>::NAME),*]
        };
    }

    /// The generated table and the list of message types agree, so the
    /// sizes (taken from the types) line up with the shapes.
    #[test]
    fn table_matches_the_message_list() {
        let names: [&str; MESSAGE_COUNT] = crate::for_each_message!(names);
        for (shape, name) in SHAPES.iter().zip(names) {
            assert_eq!(shape.name, name);
            assert!(shape.fields.len() <= MAX_FIELDS, "{name}: too many fields");
            assert!(shape.fields.windows(2).all(|w| w[0].number < w[1].number));
        }
    }
}
