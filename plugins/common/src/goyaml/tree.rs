//! A YAML document as a tree of nodes, with what Go's YAML libraries look
//! at: each scalar's text, whether it was written plain (only plain,
//! untagged scalars are resolved to numbers, booleans and null), its tag,
//! and its line. Aliases are expanded (with a size limit).

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};

use super::DecodeError;

/// Nesting limit: deeper documents are refused (no stack exhaustion).
const MAX_DEPTH: usize = 256;
/// Node limit, counting alias expansions (no alias bombs).
const MAX_NODES: usize = 100_000;

/// A scalar's text and how it was written.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Scalar {
    /// The text after escape processing.
    pub(crate) value: String,
    /// Written plain (no quotes, not a block scalar).
    pub(crate) plain: bool,
    /// The resolved tag (`tag:yaml.org,2002:int`, `!local`), if any.
    pub(crate) tag: Option<String>,
    /// 1-based line.
    pub(crate) line: usize,
}

/// A node of the document.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Node {
    /// A scalar.
    Scalar(Scalar),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping: pairs in document order (duplicates kept).
    Map(Vec<(Node, Node)>),
}

/// The tag prefix of the YAML core schema (`!!x` is this plus `x`).
pub(crate) const CORE_TAG: &str = "tag:yaml.org,2002:";

struct Builder<'a> {
    events: Parser<'a, serde_saphyr::granit_parser::StrInput<'a>>,
    anchors: HashMap<usize, Node>,
    nodes: usize,
}

fn syntax(e: impl std::fmt::Display) -> DecodeError {
    DecodeError::Syntax(e.to_string())
}

impl<'a> Builder<'a> {
    fn next(&mut self) -> Result<(Event<'a>, usize), DecodeError> {
        match self.events.next_event() {
            Some(Ok((ev, span))) => Ok((ev, span.start.line())),
            Some(Err(e)) => Err(syntax(e)),
            None => Err(DecodeError::Syntax("unexpected end of document".into())),
        }
    }

    fn count(&mut self, n: usize) -> Result<(), DecodeError> {
        self.nodes += n;
        if self.nodes > MAX_NODES {
            return Err(DecodeError::Syntax(format!(
                "document too large (more than {MAX_NODES} nodes, aliases expanded)"
            )));
        }
        Ok(())
    }

    /// The node starting with the next event; `Ok(None)` at the end of a
    /// collection or document.
    fn node(&mut self, depth: usize) -> Result<Option<Node>, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(DecodeError::Syntax(format!(
                "document nested deeper than {MAX_DEPTH} levels"
            )));
        }
        let (ev, line) = self.next()?;
        let (node, anchor) = match ev {
            Event::SequenceEnd | Event::MappingEnd | Event::DocumentEnd | Event::StreamEnd => {
                return Ok(None);
            }
            Event::Scalar(value, style, anchor, tag) => {
                let node = Node::Scalar(Scalar {
                    value: value.into_owned(),
                    plain: style == ScalarStyle::Plain,
                    tag: tag.map(|t| format!("{}{}", t.handle(), t.suffix())),
                    line,
                });
                (node, anchor)
            }
            Event::Alias(id) => {
                let node =
                    self.anchors.get(&id).cloned().ok_or_else(|| {
                        DecodeError::Syntax(format!("line {line}: unknown anchor"))
                    })?;
                self.count(size(&node))?;
                return Ok(Some(node));
            }
            Event::SequenceStart(_, anchor, _) => {
                let mut items = Vec::new();
                while let Some(n) = self.node(depth + 1)? {
                    items.push(n);
                }
                (Node::Seq(items), anchor)
            }
            Event::MappingStart(_, anchor, _) => {
                let mut pairs = Vec::new();
                while let Some(k) = self.node(depth + 1)? {
                    let v = self.node(depth + 1)?.ok_or_else(|| {
                        DecodeError::Syntax(format!("line {line}: mapping key without value"))
                    })?;
                    pairs.push((k, v));
                }
                (Node::Map(pairs), anchor)
            }
            // Stream and document starts, anchor metadata, comments: skip.
            _ => return self.node(depth),
        };
        self.count(1)?;
        if anchor != 0 {
            self.anchors.insert(anchor, node.clone());
        }
        Ok(Some(node))
    }
}

fn size(n: &Node) -> usize {
    match n {
        Node::Scalar(_) => 1,
        Node::Seq(items) => 1 + items.iter().map(size).sum::<usize>(),
        Node::Map(pairs) => 1 + pairs.iter().map(|(k, v)| size(k) + size(v)).sum::<usize>(),
    }
}

/// Parses the first document of `text` (later documents are ignored, as
/// Go's `Unmarshal` does). `None` for an empty document.
pub(crate) fn parse(text: &str) -> Result<Option<Node>, DecodeError> {
    let mut b = Builder {
        events: Parser::new_from_str(text),
        anchors: HashMap::new(),
        nodes: 0,
    };
    b.node(0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn scalar(n: &Node) -> (&str, bool, Option<&str>) {
        match n {
            Node::Scalar(s) => (s.value.as_str(), s.plain, s.tag.as_deref()),
            other => panic!("not a scalar: {other:?}"),
        }
    }

    #[test]
    fn styles_tags_and_aliases() {
        let n = parse("a: &x 1\nb: '2'\nc: !!str 3\nd: *x\ne: |\n  text\n")
            .unwrap()
            .unwrap();
        let Node::Map(pairs) = n else { panic!() };
        assert_eq!(scalar(&pairs[0].1), ("1", true, None));
        assert_eq!(scalar(&pairs[1].1), ("2", false, None));
        assert_eq!(
            scalar(&pairs[2].1),
            ("3", true, Some("tag:yaml.org,2002:str"))
        );
        assert_eq!(scalar(&pairs[3].1), ("1", true, None));
        assert_eq!(scalar(&pairs[4].1), ("text\n", false, None));
    }

    #[test]
    fn empty_and_multiple_documents() {
        assert_eq!(parse("").unwrap(), None);
        assert_eq!(parse("# only a comment\n").unwrap(), None);
        let n = parse("--- 1\n--- 2\n").unwrap().unwrap();
        assert_eq!(scalar(&n).0, "1");
    }

    #[test]
    fn limits() {
        let deep = "[".repeat(MAX_DEPTH + 10) + &"]".repeat(MAX_DEPTH + 10);
        assert!(matches!(parse(&deep), Err(DecodeError::Syntax(_))));
        let mut bomb = String::from("a: &a [x, x, x, x, x, x, x, x, x, x]\n");
        for i in 0..6 {
            let prev = if i == 0 {
                "a".to_string()
            } else {
                format!("b{}", i - 1)
            };
            bomb.push_str(&format!(
                "b{i}: &b{i} [*{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}, *{prev}]\n"
            ));
        }
        let e = parse(&bomb).unwrap_err();
        assert!(e.to_string().contains("too large"), "{e}");
        assert!(parse("a: [1, 2").is_err());
        assert!(parse("a: *nope").is_err());
    }
}
