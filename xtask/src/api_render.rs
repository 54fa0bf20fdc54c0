//! Renders a crate's public API from rustdoc's JSON output as sorted text
//! lines, one item a line with full paths, so that two versions of a
//! crate compare with a line diff.
//!
//! The JSON is read as untyped `serde_json::Value`, not through a crate
//! pinned to one format version: a shape this renderer does not know is
//! printed as compact JSON (a spurious difference to look at, never a
//! crash), so a toolchain update cannot break the check.
//!
//! Each [`Line`] knows whether adding it breaks users of the item it
//! belongs to: a required trait item, a field of a struct that can be
//! built with a literal, a variant of an exhaustive enum. Such lines carry
//! a trailing marker (`// required`, `// exhaustive`), so the marker is in
//! the committed snapshot too and a change of it shows as a change.

use std::collections::{BTreeSet, HashSet};

use serde_json::Value;

/// One line of a crate's public API.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Line {
    /// The text as committed in the snapshot.
    pub text: String,
    /// For an item inside another (a field, a variant, a trait item): the
    /// text of its owner's line, and whether adding this item to an
    /// existing owner breaks its users.
    pub owner: Option<(String, bool)>,
}

/// Renders the crate in `doc` (rustdoc JSON of one crate) as sorted,
/// de-duplicated lines.
pub fn render(doc: &Value) -> Vec<Line> {
    let mut r = Renderer {
        doc,
        lines: BTreeSet::new(),
        walked: HashSet::new(),
    };
    if let Some(root) = doc.get("root").map(id_key) {
        let name = r
            .item(&root)
            .and_then(|i| i["name"].as_str())
            .unwrap_or("crate")
            .to_owned();
        r.module(&root, &name);
    }
    let mut lines: Vec<Line> = r.lines.into_iter().collect();
    lines.sort_by_cached_key(|l| {
        let owner = l.owner.as_ref().map(|(o, _)| o.as_str());
        (
            item_path(owner.unwrap_or(&l.text)).to_owned(),
            owner.is_some(),
            l.text.clone(),
        )
    });
    lines
}

/// The path a line declares: its first token with `::` (an impl line's is
/// its owner's, given by the caller), without generics or a signature.
fn item_path(text: &str) -> &str {
    let token = text
        .split_whitespace()
        .find(|t| t.contains("::"))
        .unwrap_or(text);
    let end = token.find(['<', '(', ':', '!']).map_or(token.len(), |i| {
        // `a::b::C`: the first `:` of a path separator is not an end.
        let mut j = i;
        while token[j..].starts_with("::") {
            match token[j + 2..].find(['<', '(', ':', '!']) {
                Some(k) => j = j + 2 + k,
                None => return token.len(),
            }
        }
        j
    });
    &token[..end]
}

/// The key of an id in `index` and `paths` (ids are numbers or strings,
/// depending on the format version).
fn id_key(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

pub(crate) struct Renderer<'a> {
    doc: &'a Value,
    lines: BTreeSet<Line>,
    /// (module id, path) pairs walked, against re-export cycles.
    walked: HashSet<(String, String)>,
}

impl Renderer<'_> {
    pub(crate) fn item(&self, id: &str) -> Option<&Value> {
        self.doc["index"].get(id)
    }

    fn push(&mut self, text: String) {
        self.lines.insert(Line { text, owner: None });
    }

    fn push_in(&mut self, text: String, owner: &str, breaking_if_added: bool) {
        self.lines.insert(Line {
            text,
            owner: Some((owner.to_owned(), breaking_if_added)),
        });
    }

    /// The canonical path of an item by id (`a::b::C`), if rustdoc knows it.
    pub(crate) fn canonical(&self, id: &Value) -> Option<String> {
        let p = self.doc["paths"].get(id_key(id))?;
        let parts: Vec<&str> = p["path"]
            .as_array()?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        Some(parts.join("::"))
    }

    fn module(&mut self, id: &str, path: &str) {
        if !self.walked.insert((id.to_owned(), path.to_owned())) {
            return;
        }
        let Some(items) = self
            .item(id)
            .and_then(|m| m["inner"]["module"]["items"].as_array())
        else {
            return;
        };
        for child in items.clone() {
            self.child(&id_key(&child), path);
        }
    }

    /// One entry of a module: an item, or a re-export.
    fn child(&mut self, id: &str, parent: &str) {
        let Some(item) = self.item(id).cloned() else {
            return;
        };
        if let Some(u) = item["inner"].get("use") {
            self.reexport(u, parent);
            return;
        }
        let Some(name) = item["name"].as_str() else {
            return;
        };
        let path = format!("{parent}::{name}");
        self.any(&item, &path);
    }

    fn reexport(&mut self, u: &Value, parent: &str) {
        let name = u["name"].as_str().unwrap_or("_");
        let target = u.get("id").filter(|v| !v.is_null());
        let local = target.map(id_key).filter(|t| self.item(t).is_some());
        match (local, u["is_glob"].as_bool().unwrap_or(false)) {
            (Some(t), true) => self.module(&t, parent),
            (Some(t), false) => {
                if let Some(item) = self.item(&t).cloned() {
                    self.any(&item, &format!("{parent}::{name}"));
                }
            }
            (None, glob) => {
                let source = target
                    .and_then(|t| self.canonical(t))
                    .unwrap_or_else(|| u["source"].as_str().unwrap_or("?").to_owned());
                let star = if glob { "::*" } else { "" };
                self.push(format!("pub use {parent}::{name}{star} = {source}{star}"));
            }
        }
    }

    /// An item reachable at `path`.
    fn any(&mut self, item: &Value, path: &str) {
        let Some((kind, inner)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
            return;
        };
        let attrs = attrs_of(item);
        match kind.as_str() {
            "module" => {
                self.push(format!("pub mod {path}"));
                if let Some(id) = item.get("id") {
                    self.module(&id_key(id), path);
                }
            }
            "struct" | "union" => self.strukt(kind, inner, path, &attrs),
            "enum" => self.enumeration(inner, path, &attrs),
            "function" => {
                let f = self.function(inner, path, "pub ");
                self.push(f);
            }
            "trait" => self.trait_(inner, path),
            "type_alias" => {
                let g = self.generics(&inner["generics"]);
                let t = self.ty(&inner["type"]);
                self.push(format!("pub type {path}{g} = {t}"));
            }
            "constant" => {
                let t = self.ty(&inner["type"]);
                self.push(format!("pub const {path}: {t}"));
            }
            "static" => {
                let m = if inner["is_mutable"].as_bool() == Some(true) {
                    "mut "
                } else {
                    ""
                };
                let t = self.ty(&inner["type"]);
                self.push(format!("pub static {m}{path}: {t}"));
            }
            "macro" => self.push(format!("macro {path}!")),
            "proc_macro" => {
                let k = inner["kind"].as_str().unwrap_or("?");
                self.push(format!("proc-macro {k} {path}"));
            }
            other => self.push(format!("pub {other} {path} {}", compact(inner))),
        }
    }

    fn strukt(&mut self, kind: &str, inner: &Value, path: &str, attrs: &str) {
        let g = self.generics(&inner["generics"]);
        let w = self.where_clause(&inner["generics"]);
        let head = format!("{attrs}pub {kind} {path}{g}{w}");
        self.push(head.clone());
        let (fields, stripped): (Vec<Value>, bool) = match inner["kind"].as_object() {
            Some(k) if k.contains_key("plain") => (
                k["plain"]["fields"].as_array().cloned().unwrap_or_default(),
                k["plain"]["has_stripped_fields"].as_bool().unwrap_or(false),
            ),
            Some(k) if k.contains_key("tuple") => {
                let all = k["tuple"].as_array().cloned().unwrap_or_default();
                let stripped = all.iter().any(Value::is_null);
                (all.into_iter().filter(|v| !v.is_null()).collect(), stripped)
            }
            _ => (
                inner["fields"].as_array().cloned().unwrap_or_default(),
                false,
            ),
        };
        // A literal can build it: adding a field breaks those literals.
        let literal = kind == "struct" && !stripped && !attrs.contains("non_exhaustive");
        for f in fields {
            let Some(field) = self.item(&id_key(&f)).cloned() else {
                continue;
            };
            let name = field["name"].as_str().unwrap_or("_");
            let t = self.ty(&field["inner"]["struct_field"]);
            let mark = if literal { " // exhaustive" } else { "" };
            self.push_in(format!("pub {path}::{name}: {t}{mark}"), &head, literal);
        }
        self.impls(inner, path, &head);
    }

    fn enumeration(&mut self, inner: &Value, path: &str, attrs: &str) {
        let g = self.generics(&inner["generics"]);
        let w = self.where_clause(&inner["generics"]);
        let head = format!("{attrs}pub enum {path}{g}{w}");
        self.push(head.clone());
        let exhaustive = !attrs.contains("non_exhaustive");
        for v in inner["variants"].as_array().cloned().unwrap_or_default() {
            let Some(var) = self.item(&id_key(&v)).cloned() else {
                continue;
            };
            let name = var["name"].as_str().unwrap_or("_");
            let shape = self.variant_shape(&var["inner"]["variant"]["kind"]);
            let mark = if exhaustive { " // exhaustive" } else { "" };
            let vattrs = attrs_of(&var);
            self.push_in(
                format!("{vattrs}pub {path}::{name}{shape}{mark}"),
                &head,
                exhaustive,
            );
        }
        self.impls(inner, path, &head);
    }

    fn variant_shape(&self, kind: &Value) -> String {
        match kind {
            Value::String(s) if s == "plain" => String::new(),
            Value::Object(o) if o.contains_key("tuple") => {
                let fields: Vec<String> = o["tuple"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|f| match self.item(&id_key(f)) {
                        Some(field) if !f.is_null() => self.ty(&field["inner"]["struct_field"]),
                        _ => "_".to_owned(),
                    })
                    .collect();
                format!("({})", fields.join(", "))
            }
            Value::Object(o) if o.contains_key("struct") => {
                let fields: Vec<String> = o["struct"]["fields"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|f| self.item(&id_key(f)))
                    .map(|field| {
                        let n = field["name"].as_str().unwrap_or("_");
                        format!("{n}: {}", self.ty(&field["inner"]["struct_field"]))
                    })
                    .collect();
                let more = if o["struct"]["has_stripped_fields"].as_bool() == Some(true) {
                    ", .."
                } else {
                    ""
                };
                format!(" {{ {}{more} }}", fields.join(", "))
            }
            other => format!(" {}", compact(other)),
        }
    }

    fn trait_(&mut self, inner: &Value, path: &str) {
        let g = self.generics(&inner["generics"]);
        let w = self.where_clause(&inner["generics"]);
        let bounds = self.bounds(&inner["bounds"]);
        let colon = if bounds.is_empty() {
            String::new()
        } else {
            format!(": {bounds}")
        };
        let unsafe_ = if inner["is_unsafe"].as_bool() == Some(true) {
            "unsafe "
        } else {
            ""
        };
        let head = format!("pub {unsafe_}trait {path}{g}{colon}{w}");
        self.push(head.clone());
        for i in inner["items"].as_array().cloned().unwrap_or_default() {
            let Some(item) = self.item(&id_key(&i)).cloned() else {
                continue;
            };
            let name = item["name"].as_str().unwrap_or("_");
            let ipath = format!("{path}::{name}");
            let Some((kind, x)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
                continue;
            };
            let (text, required) = match kind.as_str() {
                "function" => (
                    self.function(x, &ipath, ""),
                    x["has_body"].as_bool() != Some(true),
                ),
                "assoc_const" => {
                    let t = self.ty(&x["type"]);
                    (format!("const {ipath}: {t}"), x["value"].is_null())
                }
                "assoc_type" => {
                    let b = self.bounds(&x["bounds"]);
                    let b = if b.is_empty() {
                        String::new()
                    } else {
                        format!(": {b}")
                    };
                    (format!("type {ipath}{b}"), x["type"].is_null())
                }
                other => (format!("{other} {ipath} {}", compact(x)), false),
            };
            let mark = if required { " // required" } else { "" };
            self.push_in(format!("{text}{mark}"), &head, required);
        }
    }

    /// The impls of a type: its inherent public items, and the traits it
    /// implements (auto traits included; blanket impls left out).
    fn impls(&mut self, inner: &Value, path: &str, head: &str) {
        for i in inner["impls"].as_array().cloned().unwrap_or_default() {
            let Some(imp) = self.item(&id_key(&i)).cloned() else {
                continue;
            };
            let imp = &imp["inner"]["impl"];
            if !imp["blanket_impl"].is_null() {
                continue;
            }
            let g = self.generics(&imp["generics"]);
            let w = self.where_clause(&imp["generics"]);
            let for_ = self.ty(&imp["for"]);
            if imp["trait"].is_null() {
                let scope = if g.is_empty() && w.is_empty() {
                    String::new()
                } else {
                    format!(" [impl{g} {for_}{w}]")
                };
                self.inherent(imp, path, head, &scope);
                continue;
            }
            let not = if imp["is_negative"].as_bool() == Some(true) {
                "!"
            } else {
                ""
            };
            let unsafe_ = if imp["is_unsafe"].as_bool() == Some(true) {
                "unsafe "
            } else {
                ""
            };
            let t = self.path(&imp["trait"]);
            self.push_in(
                format!("{unsafe_}impl{g} {not}{t} for {for_}{w}"),
                head,
                false,
            );
        }
    }

    fn inherent(&mut self, imp: &Value, path: &str, head: &str, scope: &str) {
        for it in imp["items"].as_array().cloned().unwrap_or_default() {
            let Some(item) = self.item(&id_key(&it)).cloned() else {
                continue;
            };
            if item["visibility"].as_str() != Some("public") {
                continue;
            }
            let name = item["name"].as_str().unwrap_or("_");
            let ipath = format!("{path}::{name}");
            let Some((kind, x)) = item["inner"].as_object().and_then(|o| o.iter().next()) else {
                continue;
            };
            let text = match kind.as_str() {
                "function" => self.function(x, &ipath, "pub "),
                "assoc_const" | "constant" => format!("pub const {ipath}: {}", self.ty(&x["type"])),
                "assoc_type" => format!("pub type {ipath} = {}", self.ty(&x["type"])),
                other => format!("pub {other} {ipath} {}", compact(x)),
            };
            self.push_in(format!("{text}{scope}"), head, false);
        }
    }
}

/// The attributes that matter to users, as a prefix (`#[non_exhaustive] `).
fn attrs_of(item: &Value) -> String {
    let non_exhaustive = item["attrs"].as_array().into_iter().flatten().any(|a| {
        a.as_str().is_some_and(|s| s.contains("non_exhaustive"))
            || a.get("non_exhaustive").is_some()
    });
    if non_exhaustive {
        "#[non_exhaustive] ".to_owned()
    } else {
        String::new()
    }
}

/// An unknown shape, printed as compact JSON.
pub(crate) fn compact(v: &Value) -> String {
    v.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn item_paths() {
        assert_eq!(item_path("pub struct a::b::C<T>"), "a::b::C");
        assert_eq!(item_path("#[non_exhaustive] pub enum a::E"), "a::E");
        assert_eq!(item_path("fn a::T::m(&self) -> u8"), "a::T::m");
        assert_eq!(
            item_path("pub a::S::field: u32 // exhaustive"),
            "a::S::field"
        );
        assert_eq!(item_path("macro a::m!"), "a::m");
    }

    /// A small crate as rustdoc writes it: a struct built with literals
    /// (its fields break when added), a trait with a required and a
    /// provided method, a re-export of another crate.
    #[test]
    fn renders_items_with_their_owners() {
        let doc = serde_json::json!({
            "root": 0,
            "index": {
                "0": {"name": "k", "inner": {"module": {"items": [1, 3, 6]}}},
                "1": {"name": "S", "attrs": [], "inner": {"struct": {
                    "kind": {"plain": {"fields": [2], "has_stripped_fields": false}},
                    "generics": {"params": [], "where_predicates": []}, "impls": []}}},
                "2": {"name": "x", "inner": {"struct_field": {"primitive": "u32"}}},
                "3": {"name": "T", "inner": {"trait": {"is_unsafe": false, "items": [4, 5],
                    "generics": {"params": [], "where_predicates": []}, "bounds": []}}},
                "4": {"name": "req", "inner": {"function": {"has_body": false,
                    "sig": {"inputs": [["self", {"borrowed_ref": {"lifetime": null, "is_mutable": false, "type": {"generic": "Self"}}}]], "output": null},
                    "generics": {"params": [], "where_predicates": []}, "header": {"abi": "Rust"}}}},
                "5": {"name": "prov", "inner": {"function": {"has_body": true,
                    "sig": {"inputs": [], "output": {"resolved_path": {"path": "Vec", "id": 9, "args": {"angle_bracketed": {"args": [{"type": {"primitive": "u8"}}], "constraints": []}}}}},
                    "generics": {"params": [], "where_predicates": []}, "header": {"abi": "Rust", "is_async": true}}}},
                "6": {"name": null, "inner": {"use": {"source": "other", "name": "other", "id": 8, "is_glob": false}}}
            },
            "paths": {"8": {"path": ["other"]}, "9": {"path": ["alloc", "vec", "Vec"]}}
        });
        let lines = render(&doc);
        let texts: Vec<&str> = lines.iter().map(|l| l.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "pub struct k::S",
                "pub k::S::x: u32 // exhaustive",
                "pub trait k::T",
                "async fn k::T::prov() -> alloc::vec::Vec<u8>",
                "fn k::T::req(&self) // required",
                "pub use k::other = other",
            ]
        );
        let field = &lines[1];
        assert_eq!(field.owner, Some(("pub struct k::S".to_owned(), true)));
        let provided = &lines[3];
        assert_eq!(provided.owner, Some(("pub trait k::T".to_owned(), false)));
    }
}
