//! Types, generics, bounds and signatures of rustdoc JSON, as Rust-like
//! text with full paths (the paths rustdoc records for each id, so a
//! `use` at the item's definition does not change its line).

use serde_json::Value;

use crate::api_render::{Renderer, compact};

impl Renderer<'_> {
    /// A type.
    pub(crate) fn ty(&self, t: &Value) -> String {
        let Some((kind, x)) = t.as_object().and_then(|o| o.iter().next()) else {
            return match t {
                Value::String(s) if s == "infer" => "_".to_owned(),
                other => compact(other),
            };
        };
        match kind.as_str() {
            "resolved_path" => self.path(x),
            "generic" | "primitive" => x.as_str().unwrap_or("?").to_owned(),
            "tuple" => {
                let parts: Vec<String> = x
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|e| self.ty(e))
                    .collect();
                if parts.len() == 1 {
                    format!("({},)", parts[0])
                } else {
                    format!("({})", parts.join(", "))
                }
            }
            "slice" => format!("[{}]", self.ty(x)),
            "array" => format!(
                "[{}; {}]",
                self.ty(&x["type"]),
                x["len"].as_str().unwrap_or("?")
            ),
            "pat" => self.ty(&x["type"]),
            "borrowed_ref" => {
                let lt = x["lifetime"]
                    .as_str()
                    .map(|l| format!("{l} "))
                    .unwrap_or_default();
                let m = if x["is_mutable"].as_bool() == Some(true) {
                    "mut "
                } else {
                    ""
                };
                format!("&{lt}{m}{}", self.ty(&x["type"]))
            }
            "raw_pointer" => {
                let m = if x["is_mutable"].as_bool() == Some(true) {
                    "mut"
                } else {
                    "const"
                };
                format!("*{m} {}", self.ty(&x["type"]))
            }
            "impl_trait" => format!("impl {}", self.bounds(x)),
            "dyn_trait" => self.dyn_trait(x),
            "function_pointer" => self.fn_pointer(x),
            "qualified_path" => {
                let self_ty = self.ty(&x["self_type"]);
                let name = x["name"].as_str().unwrap_or("?");
                let args = self.args(&x["args"]);
                if x["trait"].is_null() {
                    format!("{self_ty}::{name}{args}")
                } else {
                    format!("<{self_ty} as {}>::{name}{args}", self.path(&x["trait"]))
                }
            }
            _ => compact(t),
        }
    }

    /// A path with its generic arguments (`alloc::vec::Vec<u8>`).
    pub(crate) fn path(&self, p: &Value) -> String {
        let name = p
            .get("id")
            .and_then(|id| self.canonical(id))
            .or_else(|| p["path"].as_str().map(str::to_owned))
            .or_else(|| p["name"].as_str().map(str::to_owned))
            .unwrap_or_else(|| "?".to_owned());
        format!("{name}{}", self.args(&p["args"]))
    }

    fn args(&self, a: &Value) -> String {
        let Some((kind, x)) = a.as_object().and_then(|o| o.iter().next()) else {
            return String::new();
        };
        match kind.as_str() {
            "angle_bracketed" => {
                let mut parts: Vec<String> = x["args"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|g| match g.as_object().and_then(|o| o.iter().next()) {
                        Some((k, v)) if k == "lifetime" => v.as_str().unwrap_or("'_").to_owned(),
                        Some((k, v)) if k == "type" => self.ty(v),
                        Some((k, v)) if k == "const" => {
                            v["expr"].as_str().unwrap_or("_").to_owned()
                        }
                        _ => "_".to_owned(),
                    })
                    .collect();
                for c in x["constraints"].as_array().into_iter().flatten() {
                    parts.push(self.constraint(c));
                }
                if parts.is_empty() {
                    String::new()
                } else {
                    format!("<{}>", parts.join(", "))
                }
            }
            "parenthesized" => {
                let inputs: Vec<String> = x["inputs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|t| self.ty(t))
                    .collect();
                let out = if x["output"].is_null() {
                    String::new()
                } else {
                    format!(" -> {}", self.ty(&x["output"]))
                };
                format!("({}){out}", inputs.join(", "))
            }
            "return_type_notation" => "(..)".to_owned(),
            _ => compact(a),
        }
    }

    /// `Name = T` or `Name: Bounds` inside angle brackets.
    fn constraint(&self, c: &Value) -> String {
        let name = format!(
            "{}{}",
            c["name"].as_str().unwrap_or("?"),
            self.args(&c["args"])
        );
        let b = &c["binding"];
        if let Some(eq) = b.get("equality") {
            let rhs = match eq.get("type") {
                Some(t) => self.ty(t),
                None => compact(eq),
            };
            format!("{name} = {rhs}")
        } else if let Some(bounds) = b.get("constraint") {
            format!("{name}: {}", self.bounds(bounds))
        } else {
            format!("{name} {}", compact(b))
        }
    }

    /// Bounds joined with ` + `.
    pub(crate) fn bounds(&self, bounds: &Value) -> String {
        let parts: Vec<String> = bounds
            .as_array()
            .into_iter()
            .flatten()
            .map(|b| match b.as_object().and_then(|o| o.iter().next()) {
                Some((k, v)) if k == "trait_bound" => {
                    let hrtb = self.for_lifetimes(&v["generic_params"]);
                    let m = match v["modifier"].as_str() {
                        Some("maybe") => "?",
                        Some("maybe_const") => "~const ",
                        _ => "",
                    };
                    format!("{hrtb}{m}{}", self.path(&v["trait"]))
                }
                Some((k, v)) if k == "outlives" => v.as_str().unwrap_or("'_").to_owned(),
                Some((k, v)) if k == "use" => format!("use<{}>", compact(v)),
                _ => compact(b),
            })
            .collect();
        parts.join(" + ")
    }

    fn for_lifetimes(&self, params: &Value) -> String {
        let names: Vec<&str> = params
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str())
            .collect();
        if names.is_empty() {
            String::new()
        } else {
            format!("for<{}> ", names.join(", "))
        }
    }

    fn dyn_trait(&self, x: &Value) -> String {
        let mut parts: Vec<String> = x["traits"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|t| {
                format!(
                    "{}{}",
                    self.for_lifetimes(&t["generic_params"]),
                    self.path(&t["trait"])
                )
            })
            .collect();
        if let Some(l) = x["lifetime"].as_str() {
            parts.push(l.to_owned());
        }
        format!("dyn {}", parts.join(" + "))
    }

    fn fn_pointer(&self, x: &Value) -> String {
        let hrtb = self.for_lifetimes(&x["generic_params"]);
        let header = header(&x["header"]);
        format!("{hrtb}{header}fn{}", self.signature(&x["sig"]))
    }

    /// `(a: A, b: B) -> C` of a function signature.
    fn signature(&self, sig: &Value) -> String {
        let inputs: Vec<String> = sig["inputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|pair| {
                let name = pair[0].as_str().unwrap_or("_");
                let t = &pair[1];
                if name == "self" {
                    match self.ty(t).as_str() {
                        "Self" => "self".to_owned(),
                        "&Self" => "&self".to_owned(),
                        "&mut Self" => "&mut self".to_owned(),
                        other => format!("self: {other}"),
                    }
                } else {
                    format!("{name}: {}", self.ty(t))
                }
            })
            .collect();
        let variadic = if sig["is_c_variadic"].as_bool() == Some(true) {
            ", ..."
        } else {
            ""
        };
        let out = if sig["output"].is_null() {
            String::new()
        } else {
            format!(" -> {}", self.ty(&sig["output"]))
        };
        format!("({}{variadic}){out}", inputs.join(", "))
    }

    /// A function or method line: `{vis}{header}fn {path}{generics}(..) -> T{where}`.
    pub(crate) fn function(&self, f: &Value, path: &str, vis: &str) -> String {
        let header = header(&f["header"]);
        let g = self.generics(&f["generics"]);
        let w = self.where_clause(&f["generics"]);
        format!("{vis}{header}fn {path}{g}{}{w}", self.signature(&f["sig"]))
    }

    /// `<'a, T: Bound = Default, const N: usize>` (synthetic `impl Trait`
    /// parameters left out: they show in the signature).
    pub(crate) fn generics(&self, g: &Value) -> String {
        let parts: Vec<String> = g["params"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                let name = p["name"].as_str().unwrap_or("?");
                let (kind, x) = p["kind"].as_object().and_then(|o| o.iter().next())?;
                match kind.as_str() {
                    "lifetime" => {
                        let out: Vec<&str> = x["outlives"]
                            .as_array()
                            .into_iter()
                            .flatten()
                            .filter_map(Value::as_str)
                            .collect();
                        Some(if out.is_empty() {
                            name.to_owned()
                        } else {
                            format!("{name}: {}", out.join(" + "))
                        })
                    }
                    "type" => {
                        if x["is_synthetic"].as_bool() == Some(true) {
                            return None;
                        }
                        let b = self.bounds(&x["bounds"]);
                        let b = if b.is_empty() {
                            String::new()
                        } else {
                            format!(": {b}")
                        };
                        let d = if x["default"].is_null() {
                            String::new()
                        } else {
                            format!(" = {}", self.ty(&x["default"]))
                        };
                        Some(format!("{name}{b}{d}"))
                    }
                    "const" => Some(format!("const {name}: {}", self.ty(&x["type"]))),
                    _ => Some(compact(p)),
                }
            })
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!("<{}>", parts.join(", "))
        }
    }

    /// ` where T: A, 'a: 'b` (empty without predicates).
    pub(crate) fn where_clause(&self, g: &Value) -> String {
        let parts: Vec<String> = g["where_predicates"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| match p.as_object().and_then(|o| o.iter().next()) {
                Some((k, x)) if k == "bound_predicate" => format!(
                    "{}{}: {}",
                    self.for_lifetimes(&x["generic_params"]),
                    self.ty(&x["type"]),
                    self.bounds(&x["bounds"])
                ),
                Some((k, x)) if k == "lifetime_predicate" => {
                    let out: Vec<&str> = x["outlives"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .filter_map(Value::as_str)
                        .collect();
                    format!(
                        "{}: {}",
                        x["lifetime"].as_str().unwrap_or("'_"),
                        out.join(" + ")
                    )
                }
                Some((k, x)) if k == "eq_predicate" => {
                    format!("{} = {}", self.ty(&x["lhs"]), compact(&x["rhs"]))
                }
                _ => compact(p),
            })
            .collect();
        if parts.is_empty() {
            String::new()
        } else {
            format!(" where {}", parts.join(", "))
        }
    }
}

/// `const async unsafe extern "C" ` of a function header.
fn header(h: &Value) -> String {
    let mut s = String::new();
    for (key, word) in [
        ("is_const", "const "),
        ("is_async", "async "),
        ("is_unsafe", "unsafe "),
    ] {
        if h[key].as_bool() == Some(true) {
            s.push_str(word);
        }
    }
    match &h["abi"] {
        Value::String(a) if a == "Rust" => {}
        Value::Null => {}
        Value::String(a) => s.push_str(&format!("extern \"{a}\" ")),
        Value::Object(o) => {
            if let Some(k) = o.keys().next() {
                s.push_str(&format!("extern \"{k}\" "));
            }
        }
        other => s.push_str(&format!("extern {} ", compact(other))),
    }
    s
}
