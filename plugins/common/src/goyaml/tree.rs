//! A YAML document as a tree of nodes, with what Go's YAML libraries look
//! at: each scalar's text, whether it was written plain (only plain,
//! untagged scalars are resolved to numbers, booleans and null), its tag,
//! and its line. Aliases are expanded, within the bounds of
//! [`super::limits`].

use std::collections::HashMap;

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle};

use super::DecodeError;
use super::limits::{Budget, MAX_DEPTH, MAX_INPUT_BYTES, over};

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

/// A node and what it cost: its nodes and bytes of text.
struct Built {
    node: Node,
    nodes: usize,
    bytes: usize,
}

struct Builder<'a> {
    events: Parser<'a, serde_saphyr::granit_parser::StrInput<'a>>,
    /// Anchored nodes (a copy each, charged to the budget).
    anchors: HashMap<usize, Built>,
    budget: Budget,
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

    /// The next event that is a node or the end of a collection, document
    /// or stream (stream and document starts, anchor metadata and comments
    /// are skipped, however many there are).
    fn next_node_event(&mut self) -> Result<(Event<'a>, usize), DecodeError> {
        loop {
            let (ev, line) = self.next()?;
            match ev {
                Event::SequenceEnd
                | Event::MappingEnd
                | Event::DocumentEnd
                | Event::StreamEnd
                | Event::Scalar(..)
                | Event::Alias(_)
                | Event::SequenceStart(..)
                | Event::MappingStart(..) => return Ok((ev, line)),
                _ => {}
            }
        }
    }

    /// The node starting with the next event; `Ok(None)` at the end of a
    /// collection or document.
    fn node(&mut self, depth: usize) -> Result<Option<Built>, DecodeError> {
        if depth > MAX_DEPTH {
            return Err(over("levels of nesting", MAX_DEPTH));
        }
        let (ev, line) = self.next_node_event()?;
        let (built, anchor) = match ev {
            Event::Scalar(value, style, anchor, tag) => {
                let tag = tag.map(|t| format!("{}{}", t.handle(), t.suffix()));
                let bytes = value.len() + tag.as_ref().map_or(0, String::len);
                self.budget.charge(1, bytes)?;
                let node = Node::Scalar(Scalar {
                    value: value.into_owned(),
                    plain: style == ScalarStyle::Plain,
                    tag,
                    line,
                });
                (
                    Built {
                        node,
                        nodes: 1,
                        bytes,
                    },
                    anchor,
                )
            }
            Event::Alias(id) => {
                let Some(a) = self.anchors.get(&id) else {
                    return Err(DecodeError::Syntax(format!("line {line}: unknown anchor")));
                };
                // Charged before the copy is made.
                let (nodes, bytes) = (a.nodes, a.bytes);
                self.budget.charge(nodes, bytes)?;
                let node = self.anchors.get(&id).map(|a| a.node.clone());
                return Ok(node.map(|node| Built { node, nodes, bytes }));
            }
            Event::SequenceStart(_, anchor, _) => (self.sequence(depth)?, anchor),
            Event::MappingStart(_, anchor, _) => (self.mapping(depth, line)?, anchor),
            // Ends of a collection, document or stream.
            _ => return Ok(None),
        };
        if anchor != 0 {
            // The copy kept for aliases costs what the node cost.
            self.budget.charge(built.nodes, built.bytes)?;
            let copy = Built {
                node: built.node.clone(),
                nodes: built.nodes,
                bytes: built.bytes,
            };
            self.anchors.insert(anchor, copy);
        }
        Ok(Some(built))
    }

    fn sequence(&mut self, depth: usize) -> Result<Built, DecodeError> {
        self.budget.charge(1, 0)?;
        let (mut nodes, mut bytes) = (1, 0);
        let mut items = Vec::new();
        while let Some(b) = self.node(depth + 1)? {
            nodes += b.nodes;
            bytes += b.bytes;
            items.push(b.node);
        }
        Ok(Built {
            node: Node::Seq(items),
            nodes,
            bytes,
        })
    }

    fn mapping(&mut self, depth: usize, line: usize) -> Result<Built, DecodeError> {
        self.budget.charge(1, 0)?;
        let (mut nodes, mut bytes) = (1, 0);
        let mut pairs = Vec::new();
        while let Some(k) = self.node(depth + 1)? {
            let v = self.node(depth + 1)?.ok_or_else(|| {
                DecodeError::Syntax(format!("line {line}: mapping key without value"))
            })?;
            nodes += k.nodes + v.nodes;
            bytes += k.bytes + v.bytes;
            pairs.push((k.node, v.node));
        }
        Ok(Built {
            node: Node::Map(pairs),
            nodes,
            bytes,
        })
    }
}

/// Parses the first document of `text` (later documents are ignored, as
/// Go's `Unmarshal` does) within the bounds of [`super::limits`]. `None`
/// for an empty document.
pub(crate) fn parse(text: &str) -> Result<Option<Node>, DecodeError> {
    if text.len() > MAX_INPUT_BYTES {
        return Err(over("bytes of input", MAX_INPUT_BYTES));
    }
    let mut b = Builder {
        events: Parser::new_from_str(text),
        anchors: HashMap::new(),
        budget: Budget::default(),
    };
    Ok(b.node(0)?.map(|b| b.node))
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
        use crate::goyaml::limits::{MAX_NODES, MAX_TEXT_BYTES};
        let deep = "[".repeat(MAX_DEPTH + 10) + &"]".repeat(MAX_DEPTH + 10);
        assert!(matches!(
            parse(&deep),
            Err(DecodeError::Limit {
                limit: MAX_DEPTH,
                ..
            })
        ));
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
        assert!(
            matches!(
                e,
                DecodeError::Limit {
                    limit: MAX_NODES,
                    ..
                }
            ),
            "{e}"
        );
        // A long scalar repeated by aliases: few nodes, much text.
        let text = format!(
            "a: &s {}\nb: [{}]\n",
            "x".repeat(100_000),
            "*s, ".repeat(20)
        );
        let e = parse(&text).unwrap_err();
        assert!(
            matches!(
                e,
                DecodeError::Limit {
                    limit: MAX_TEXT_BYTES,
                    ..
                }
            ),
            "{e}"
        );
        let big = "a".repeat(MAX_INPUT_BYTES + 1);
        assert!(matches!(parse(&big), Err(DecodeError::Limit { .. })));
        assert!(parse("a: [1, 2").is_err());
        assert!(parse("a: *nope").is_err());
    }

    /// Comments and document markers are skipped in a loop: many of them
    /// cost no stack.
    #[test]
    fn many_comments_and_markers() {
        let text = "#\n".repeat(100_000) + "a: 1\n";
        assert!(parse(&text).unwrap().is_some());
    }
}
