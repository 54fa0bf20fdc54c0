//! Reading list-valued annotations.

/// Parses a YAML sequence of strings, as found in the
/// [`REQUIRED_PLUGINS_ANNOTATION`](super::REQUIRED_PLUGINS_ANNOTATION) value.
///
/// Accepted: a flow sequence (`[a, "b", 'c']`, which includes JSON arrays of
/// strings), a block sequence (one `- item` per line), or an empty document /
/// `null` / `~` (no items). Anything else (a bare scalar, a mapping, nested
/// sequences) is an error, with the line and column of the problem, which
/// the default validator turns into a rejection (fail closed, as upstream
/// does on a YAML error).
pub fn parse_string_list(s: &str) -> Result<Vec<String>, String> {
    if s.trim().is_empty() {
        return Ok(Vec::new());
    }
    // One line (`problem at line L, column C`): the message ends up in a
    // rejection reason, without a snippet of the input.
    let mut options = serde_saphyr::Options::default();
    options.with_snippet = false;
    serde_saphyr::from_str_with_options::<Option<Vec<String>>>(s, options)
        .map(Option::unwrap_or_default)
        .map_err(|e| e.to_string())
}
