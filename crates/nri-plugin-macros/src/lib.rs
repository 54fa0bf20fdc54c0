//! The `#[plugin]` attribute of the NRI plugin SDK. Use it as
//! `#[nri_plugin::plugin]` (re-exported there, with the documentation);
//! this crate is an implementation detail of `nri-plugin`.
//!
//! The attribute goes on an `impl Plugin for T` block. It reads the names
//! of the methods the block defines and adds the trait's required
//! `IMPLEMENTED` constant listing the events those methods handle, so the
//! subscription can be derived from the code instead of a hand-kept list.
//! It needs no parser crate: the method names are the identifiers that
//! follow `fn` at the top level of the block.

use proc_macro::{Delimiter, Group, Ident, Literal, Punct, Spacing, Span, TokenStream, TokenTree};

/// `Plugin` event methods and the `nri_plugin::api::Event` variant each one
/// handles. Must list every event method of `nri_plugin::Plugin` (a test in
/// `nri-plugin` checks that a plugin defining all of them handles all 14
/// events).
const EVENT_METHODS: [(&str, &str); 15] = [
    ("run_pod_sandbox", "RunPodSandbox"),
    ("update_pod_sandbox", "UpdatePodSandbox"),
    ("post_update_pod_sandbox", "PostUpdatePodSandbox"),
    ("stop_pod_sandbox", "StopPodSandbox"),
    ("remove_pod_sandbox", "RemovePodSandbox"),
    ("create_container", "CreateContainer"),
    ("create_container_encoded", "CreateContainer"),
    ("post_create_container", "PostCreateContainer"),
    ("start_container", "StartContainer"),
    ("post_start_container", "PostStartContainer"),
    ("update_container", "UpdateContainer"),
    ("post_update_container", "PostUpdateContainer"),
    ("stop_container", "StopContainer"),
    ("remove_container", "RemoveContainer"),
    (
        "validate_container_adjustment",
        "ValidateContainerAdjustment",
    ),
];

/// Derives an NRI plugin's handled events from the methods of its
/// `impl Plugin` block. Documented in `nri-plugin` (`nri_plugin::plugin`).
#[proc_macro_attribute]
pub fn plugin(attr: TokenStream, item: TokenStream) -> TokenStream {
    if let Some(t) = attr.into_iter().next() {
        return compile_error(t.span(), "#[nri_plugin::plugin] takes no arguments");
    }
    let mut tokens: Vec<TokenTree> = item.into_iter().collect();
    let is_impl = tokens
        .iter()
        .any(|t| matches!(t, TokenTree::Ident(i) if i.to_string() == "impl"));
    let body = match tokens.last() {
        Some(TokenTree::Group(g)) if is_impl && g.delimiter() == Delimiter::Brace => g.clone(),
        other => {
            let span = other.map_or_else(Span::call_site, TokenTree::span);
            return compile_error(
                span,
                "#[nri_plugin::plugin] goes on an `impl nri_plugin::Plugin for T { ... }` block (the trait's documentation shows one)",
            );
        }
    };
    let events = handled_events(body.stream());
    let mut stream = implemented_const(&events, body.span());
    stream.extend(body.stream());
    let mut new_body = Group::new(Delimiter::Brace, stream);
    new_body.set_span(body.span());
    let last = tokens.len() - 1;
    tokens[last] = TokenTree::Group(new_body);
    tokens.into_iter().collect()
}

/// The `Event` variants of the event methods defined at the top level of an
/// impl block's body (nested items live inside groups and are not seen).
fn handled_events(body: TokenStream) -> Vec<&'static str> {
    let mut events = Vec::new();
    let mut after_fn = false;
    for t in body {
        let TokenTree::Ident(ident) = t else {
            after_fn = false;
            continue;
        };
        let name = ident.to_string();
        if after_fn {
            let found = EVENT_METHODS.iter().find(|(m, _)| *m == name);
            if let Some((_, event)) = found {
                if !events.contains(event) {
                    events.push(*event);
                }
            }
        }
        after_fn = name == "fn";
    }
    events
}

/// `const IMPLEMENTED: ::nri_plugin::Implemented =
/// ::nri_plugin::Implemented::__from_methods(&[::nri_plugin::api::Event::X, ...]);`
fn implemented_const(events: &[&str], span: Span) -> TokenStream {
    let mut list = Vec::new();
    for (i, event) in events.iter().enumerate() {
        if i > 0 {
            list.push(punct(',', span));
        }
        list.extend(path(&["nri_plugin", "api", "Event", event], span));
    }
    let mut array = vec![punct('&', span)];
    array.push(group(Delimiter::Bracket, list, span));

    let mut out = vec![ident("const", span), ident("IMPLEMENTED", span)];
    out.push(punct(':', span));
    out.extend(path(&["nri_plugin", "Implemented"], span));
    out.push(punct('=', span));
    out.extend(path(&["nri_plugin", "Implemented", "__from_methods"], span));
    out.push(group(Delimiter::Parenthesis, array, span));
    out.push(punct(';', span));
    out.into_iter().collect()
}

/// `::a::b::c`
fn path(segments: &[&str], span: Span) -> Vec<TokenTree> {
    let mut out = Vec::new();
    for s in segments {
        let mut first = Punct::new(':', Spacing::Joint);
        first.set_span(span);
        out.push(TokenTree::Punct(first));
        out.push(punct(':', span));
        out.push(ident(s, span));
    }
    out
}

fn ident(name: &str, span: Span) -> TokenTree {
    TokenTree::Ident(Ident::new(name, span))
}

fn punct(c: char, span: Span) -> TokenTree {
    let mut p = Punct::new(c, Spacing::Alone);
    p.set_span(span);
    TokenTree::Punct(p)
}

fn group(delimiter: Delimiter, inner: Vec<TokenTree>, span: Span) -> TokenTree {
    let mut g = Group::new(delimiter, inner.into_iter().collect());
    g.set_span(span);
    TokenTree::Group(g)
}

/// `::core::compile_error! { "message" }` pointing at `span`.
fn compile_error(span: Span, message: &str) -> TokenStream {
    let mut out = path(&["core", "compile_error"], span);
    out.push(punct('!', span));
    let mut lit = Literal::string(message);
    lit.set_span(span);
    out.push(group(Delimiter::Brace, vec![TokenTree::Literal(lit)], span));
    out.into_iter().collect()
}
