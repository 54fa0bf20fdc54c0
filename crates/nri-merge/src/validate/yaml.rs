//! A small parser for the YAML subset used by list-valued annotations.

/// Parses a YAML sequence of strings, as found in the
/// [`REQUIRED_PLUGINS_ANNOTATION`](super::REQUIRED_PLUGINS_ANNOTATION) value.
///
/// Accepted: a flow sequence (`[a, "b", 'c']`, which includes JSON arrays of
/// strings), a block sequence (one `- item` per line), or an empty document /
/// `null` / `~` (no items). Items are plain, double-quoted (with `\"`, `\\`,
/// `\n`, `\t`, `\/` and `\uXXXX` escapes) or single-quoted (`''` for a quote)
/// scalars. Anything else (a bare scalar, a mapping, nested sequences) is an
/// error, which the default validator turns into a rejection (fail closed,
/// as upstream does on a YAML error).
pub fn parse_string_list(s: &str) -> Result<Vec<String>, String> {
    let t = s.trim();
    if t.is_empty() || t == "~" || t == "null" {
        return Ok(Vec::new());
    }
    if let Some(inner) = t.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| "unterminated flow sequence".to_owned())?;
        return parse_flow(inner);
    }
    parse_block(t)
}

fn parse_flow(inner: &str) -> Result<Vec<String>, String> {
    let mut items = Vec::new();
    let mut rest = inner.trim_start();
    while !rest.is_empty() {
        let (item, after) = scalar(rest, true)?;
        items.push(item);
        let after = after.trim_start();
        rest = match after.strip_prefix(',') {
            Some(r) => r.trim_start(),
            None if after.is_empty() => after,
            None => return Err(format!("unexpected {after:?} in flow sequence")),
        };
    }
    Ok(items)
}

fn parse_block(t: &str) -> Result<Vec<String>, String> {
    let mut items = Vec::new();
    for line in t.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let item = if line == "-" {
            ""
        } else {
            line.strip_prefix("- ")
                .ok_or_else(|| format!("not a YAML list of strings: {line:?}"))?
                .trim_start()
        };
        let (value, after) = scalar(item, false)?;
        let after = after.trim();
        if !after.is_empty() && !after.starts_with('#') {
            return Err(format!("unexpected {after:?} after list item"));
        }
        items.push(value);
    }
    Ok(items)
}

/// Reads one scalar from the start of `s`; returns it and the rest.
fn scalar(s: &str, flow: bool) -> Result<(String, &str), String> {
    if let Some(body) = s.strip_prefix('"') {
        return double_quoted(body);
    }
    if let Some(body) = s.strip_prefix('\'') {
        return single_quoted(body);
    }
    let end = if flow {
        s.find(',').unwrap_or(s.len())
    } else {
        s.find(" #").unwrap_or(s.len())
    };
    let (raw, rest) = s.split_at(end);
    let plain = raw.trim();
    if plain.starts_with(['[', ']', '{', '}', '&', '*', '!', '|', '>', '%', '@', '`'])
        || plain.contains(": ")
        || plain.ends_with(':')
        || (flow && plain.contains(['[', ']', '{', '}']))
    {
        return Err(format!("not a plain string: {plain:?}"));
    }
    Ok((plain.to_owned(), rest))
}

fn double_quoted(body: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut chars = body.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return Ok((out, &body[i + 1..])),
            '\\' => {
                let (_, e) = chars
                    .next()
                    .ok_or_else(|| "unterminated escape".to_owned())?;
                match e {
                    '"' => out.push('"'),
                    '\\' => out.push('\\'),
                    '/' => out.push('/'),
                    'n' => out.push('\n'),
                    't' => out.push('\t'),
                    'u' => {
                        let mut code = 0u32;
                        for _ in 0..4 {
                            let (_, h) =
                                chars.next().ok_or_else(|| "short \\u escape".to_owned())?;
                            let d = h.to_digit(16).ok_or_else(|| "bad \\u escape".to_owned())?;
                            code = code * 16 + d;
                        }
                        out.push(char::from_u32(code).ok_or_else(|| "bad \\u escape".to_owned())?);
                    }
                    other => return Err(format!("unsupported escape \\{other}")),
                }
            }
            c => out.push(c),
        }
    }
    Err("unterminated double-quoted string".to_owned())
}

fn single_quoted(body: &str) -> Result<(String, &str), String> {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some(pos) = rest.find('\'') else {
            return Err("unterminated single-quoted string".to_owned());
        };
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 1..];
        if let Some(r) = after.strip_prefix('\'') {
            out.push('\'');
            rest = r;
        } else {
            return Ok((out, after));
        }
    }
}
