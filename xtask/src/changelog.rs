//! Reading CHANGELOG.md: its version sections and, in each, one section
//! per crate family.

/// The crate families of CHANGELOG.md: the start of each family's `###`
/// header, and the published crates whose entries go there.
pub const FAMILIES: [(&str, &[&str]); 4] = [
    (
        "### SDK crates",
        &[
            "nri-ttrpc",
            "nri-mux",
            "nri-api",
            "nri-plugin",
            "nri-plugin-macros",
        ],
    ),
    (
        "### Runtime crates",
        &[
            "nri-merge",
            "nri-runtime",
            "nri-oci",
            "nri-sim",
            "nri-conformance",
        ],
    ),
    ("### `nri` command", &["nri-cli", "nri-bench"]),
    ("### `nri-proxy`", &["nri-proxy"]),
];

/// The header of the sample plugins' family (no published crate).
pub const SAMPLES: &str = "### Sample plugins";

/// The family header of a published crate.
pub fn family_of(krate: &str) -> Option<&'static str> {
    FAMILIES
        .iter()
        .find(|(_, crates)| crates.contains(&krate))
        .map(|(header, _)| *header)
}

/// The text of the version section `## [name]` (without its header line),
/// up to the next `## [` section or the link references.
pub fn section<'a>(changelog: &'a str, name: &str) -> Option<&'a str> {
    let header = format!("## [{name}]");
    let start = changelog
        .lines()
        .scan(0usize, |pos, line| {
            let here = *pos;
            *pos += line.len() + 1;
            Some((here, line))
        })
        .find(|(_, line)| line.starts_with(&header))
        .map(|(pos, line)| pos + line.len() + 1)?;
    let rest = changelog.get(start..)?;
    let end = rest
        .find("\n## [")
        .or_else(|| rest.find("\n[Unreleased]:"))
        .unwrap_or(rest.len());
    Some(&rest[..end])
}

/// The header line of the version section `## [name]`.
pub fn header_line<'a>(changelog: &'a str, name: &str) -> Option<&'a str> {
    let header = format!("## [{name}]");
    changelog.lines().find(|l| l.starts_with(&header))
}

/// The entries (`- ` lines) of one family within a version section.
pub fn family_entries(section: &str, family_header: &str) -> usize {
    let mut inside = false;
    let mut n = 0;
    for line in section.lines() {
        if line.starts_with("### ") {
            inside = line.starts_with(family_header);
        } else if inside && line.starts_with("- ") {
            n += 1;
        }
    }
    n
}

/// Whether the version section's header carries a release date
/// (`## [0.1.0] - 2026-12-07`).
pub fn has_date(header: &str) -> bool {
    let Some((_, date)) = header.split_once("] - ") else {
        return false;
    };
    let b = date.trim().as_bytes();
    b.len() == 10
        && b.iter().enumerate().all(|(i, c)| match i {
            4 | 7 => *c == b'-',
            _ => c.is_ascii_digit(),
        })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const LOG: &str = "# Changelog\n\n## [Unreleased]\n\n### SDK crates (`nri-api`)\n\n- a change\n  with two lines\n\n### Runtime crates (`nri-runtime`)\n\n### `nri` command\n\n## [0.1.0] - 2026-12-07\n\n### Runtime crates\n\n- old\n\n[Unreleased]: x\n";

    #[test]
    fn sections_and_their_family_entries() {
        let unreleased = section(LOG, "Unreleased").unwrap();
        assert_eq!(family_entries(unreleased, "### SDK crates"), 1);
        assert_eq!(family_entries(unreleased, "### Runtime crates"), 0);
        let released = section(LOG, "0.1.0").unwrap();
        assert_eq!(family_entries(released, "### Runtime crates"), 1);
        assert!(!released.contains("[Unreleased]:"));
        assert!(section(LOG, "0.2.0").is_none());
    }

    #[test]
    fn release_dates() {
        assert!(has_date(header_line(LOG, "0.1.0").unwrap()));
        assert!(!has_date("## [0.1.0] - UNRELEASED"));
        assert!(!has_date("## [Unreleased]"));
    }

    #[test]
    fn every_published_crate_has_a_family() {
        for c in [
            "nri-plugin",
            "nri-runtime",
            "nri-cli",
            "nri-proxy",
            "nri-bench",
        ] {
            assert!(family_of(c).is_some(), "{c}");
        }
        assert_eq!(family_of("nri-template"), None);
    }
}
