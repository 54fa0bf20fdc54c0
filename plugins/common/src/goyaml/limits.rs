//! What decoding one document may cost, whoever wrote it: annotations are
//! written by anyone who can create a pod. Every bound is checked while
//! the document is read, before the cost is paid.
//!
//! - The text: at most [`MAX_INPUT_BYTES`], refused before it is parsed.
//! - Nesting: at most [`MAX_DEPTH`] collections deep.
//! - Nodes: at most [`MAX_NODES`] scalars, sequences and mappings built,
//!   an alias counted as every node it copies, an anchor as the copy kept
//!   of its node (so nested anchors and aliases cannot multiply a small
//!   text).
//! - Text: at most [`MAX_TEXT_BYTES`] of scalar text (values, keys, tags)
//!   built, counted the same way.
//! - Errors: at most [`MAX_ERRORS`] messages kept (the rest are counted);
//!   a value quoted in a message, a notice or a log line is cut at
//!   [`MAX_EXCERPT_BYTES`], a key path at [`MAX_PATH_BYTES`].
//!
//! Every step of the decoding is linear in the nodes and text it reads
//! (map keys are hashed, never compared with each other pairwise), so the
//! CPU time is bounded by these numbers too.

use std::borrow::Cow;
use std::fmt::Write as _;

use super::DecodeError;
use super::resolve::Resolved;

/// Largest document in bytes (Kubernetes' limit on all the annotations of
/// one object together); larger ones are refused before they are parsed.
pub const MAX_INPUT_BYTES: usize = 256 * 1024;
/// Deepest nesting of sequences and mappings.
pub const MAX_DEPTH: usize = 64;
/// Nodes built, aliases and anchors counted as the nodes they copy.
pub const MAX_NODES: usize = 10_000;
/// Bytes of scalar text built (values, keys, tags), aliases and anchors
/// counted as the text they copy.
pub const MAX_TEXT_BYTES: usize = 1 << 20;
/// Error messages kept of one document (Go reports all of them; past this
/// many, the rest are counted).
pub const MAX_ERRORS: usize = 8;
/// Longest key path (`[3].options[0]`) in a notice or an error.
pub const MAX_PATH_BYTES: usize = 128;
/// Longest excerpt of a value in a message, a notice or a log line.
pub const MAX_EXCERPT_BYTES: usize = 128;

/// `s` cut at `max` bytes (at a character boundary) with a note of its
/// length, or `s` itself when it fits.
///
/// ```
/// use nri_sample_common::goyaml::excerpt;
///
/// assert_eq!(excerpt("short", 10), "short");
/// assert_eq!(excerpt("abcdefghij-klm", 5), "abcde… (14 bytes)");
/// ```
pub fn excerpt(s: &str, max: usize) -> Cow<'_, str> {
    if s.len() <= max {
        return Cow::Borrowed(s);
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Cow::Owned(format!("{}… ({} bytes)", &s[..end], s.len()))
}

/// The limit a document went over, as the error.
pub(crate) fn over(what: &'static str, limit: usize) -> DecodeError {
    DecodeError::Limit { what, limit }
}

/// Nodes and text bytes built so far, against [`MAX_NODES`] and
/// [`MAX_TEXT_BYTES`].
#[derive(Debug, Default)]
pub(crate) struct Budget {
    nodes: usize,
    bytes: usize,
}

impl Budget {
    /// Charges `nodes` nodes and `bytes` bytes of text, before they are
    /// built.
    pub(crate) fn charge(&mut self, nodes: usize, bytes: usize) -> Result<(), DecodeError> {
        self.nodes = self.nodes.saturating_add(nodes);
        self.bytes = self.bytes.saturating_add(bytes);
        if self.nodes > MAX_NODES {
            return Err(over("nodes (aliases expanded)", MAX_NODES));
        }
        if self.bytes > MAX_TEXT_BYTES {
            return Err(over("bytes of text (aliases expanded)", MAX_TEXT_BYTES));
        }
        Ok(())
    }
}

/// Where a node is, built on the stack as the decoder descends and
/// rendered (cut at [`MAX_PATH_BYTES`]) only for a notice or an error.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Path<'a> {
    /// The document.
    Root,
    /// A mapping entry.
    Key(&'a Path<'a>, &'a str),
    /// A mapping entry with a key that is not a string.
    Resolved(&'a Path<'a>, &'a Resolved),
    /// A sequence item.
    Index(&'a Path<'a>, usize),
}

impl<'a> Path<'a> {
    /// The entry `key` under this one.
    pub(crate) fn key(&'a self, key: &'a str) -> Path<'a> {
        Path::Key(self, key)
    }

    /// The item `i` under this one.
    pub(crate) fn index(&'a self, i: usize) -> Path<'a> {
        Path::Index(self, i)
    }

    /// `a.b[2].c`, cut at [`MAX_PATH_BYTES`].
    pub(crate) fn render(&self) -> String {
        let mut segs = Vec::new();
        let mut at = self;
        loop {
            match at {
                Path::Root => break,
                Path::Key(p, _) | Path::Resolved(p, _) | Path::Index(p, _) => {
                    segs.push(*at);
                    at = p;
                }
            }
        }
        let mut out = String::new();
        for seg in segs.iter().rev() {
            if out.len() >= MAX_PATH_BYTES {
                out.push('…');
                break;
            }
            let sep = if out.is_empty() { "" } else { "." };
            match seg {
                Path::Key(_, k) => {
                    let _ = write!(out, "{sep}{}", excerpt(k, MAX_PATH_BYTES / 2));
                }
                Path::Resolved(_, k) => {
                    let text = super::key_text(k);
                    let _ = write!(out, "{sep}{}", excerpt(&text, MAX_PATH_BYTES / 2));
                }
                Path::Index(_, i) => {
                    let _ = write!(out, "[{i}]");
                }
                Path::Root => {}
            }
        }
        out
    }
}

/// Error messages of one document, at most [`MAX_ERRORS`] kept.
#[derive(Debug, Default)]
pub(crate) struct Errors {
    kept: Vec<String>,
    more: usize,
}

impl Errors {
    pub(crate) fn push(&mut self, e: String) {
        if self.kept.len() < MAX_ERRORS {
            self.kept.push(e);
        } else {
            self.more += 1;
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.kept.is_empty()
    }

    /// The messages joined with `; ` (and how many more there were).
    pub(crate) fn joined(&self) -> String {
        let mut s = self.kept.join("; ");
        if self.more > 0 {
            let _ = write!(s, "; and {} more errors", self.more);
        }
        s
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn paths_render_lazily_and_cut() {
        let root = Path::Root;
        let a = root.key("a");
        let i = a.index(3);
        let b = i.key("b");
        assert_eq!(b.render(), "a[3].b");
        let long = "k".repeat(1000);
        let l = b.key(&long);
        let deep = l.key(&long);
        let r = deep.render();
        assert!(r.len() < MAX_PATH_BYTES * 2, "{}", r.len());
        assert!(r.starts_with("a[3].b.kkk"), "{r}");
    }

    #[test]
    fn excerpts_cut_at_char_boundaries() {
        let s = "é".repeat(100);
        let e = excerpt(&s, 5);
        assert_eq!(e, "éé… (200 bytes)");
    }

    #[test]
    fn errors_are_capped() {
        let mut e = Errors::default();
        for i in 0..100 {
            e.push(format!("e{i}"));
        }
        let j = e.joined();
        assert!(j.starts_with("e0; e1;"), "{j}");
        assert!(j.ends_with("and 92 more errors"), "{j}");
    }

    #[test]
    fn the_budget_counts_nodes_and_bytes() {
        let mut b = Budget::default();
        b.charge(MAX_NODES, 0).unwrap();
        assert!(matches!(
            b.charge(1, 0),
            Err(DecodeError::Limit {
                limit: MAX_NODES,
                ..
            })
        ));
        let mut b = Budget::default();
        assert!(b.charge(1, MAX_TEXT_BYTES + 1).is_err());
    }
}
