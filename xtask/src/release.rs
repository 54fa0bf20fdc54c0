//! `cargo xtask release-check [--order]`: what a release needs that
//! `cargo package` does not check, without network or a registry.
//!
//! - every published crate has the workspace's version, the metadata a
//!   crates.io page needs (description, license, repository, readme,
//!   documentation, keywords, categories), its README and the LICENSE;
//! - a published crate depends on workspace members only if they are
//!   published too, by a version requirement its version meets;
//! - the publish order (each crate after those it depends on);
//! - the version everywhere else: deploy/images.yaml, and every
//!   `nri-* = "X.Y"` requirement written in the plugin template, the
//!   `nri new plugin` scaffold and the docs;
//! - CHANGELOG.md has `[Unreleased]` with every family section; once the
//!   tag `vX.Y.Z` exists, a section for the version with its date (before
//!   the tag the section may not exist yet; if it does, it needs its link
//!   reference).
//!
//! `--order` prints only the publish order, one crate a line (used by
//! scripts/package-check.sh).

use std::fs;
use std::path::Path;
use std::process::{Command, ExitCode};

use anyhow::{Context, Result};

use crate::changelog;
use crate::workspace::{Package, Workspace};

/// Files whose `nri-* = "X.Y"` requirements must accept the version.
const VERSIONED_FILES: &[&str] = &[
    "plugins/template/Cargo.toml",
    "tools/nri-cli/src/new/Cargo.toml.tmpl",
    "README.md",
];

/// `cargo xtask release-check [--order]`.
pub fn run(root: &Path, order_only: bool) -> Result<ExitCode> {
    let ws = Workspace::load(root)?;
    let order = ws.publish_order()?;
    if order_only {
        for p in &order {
            println!("{}", p.name);
        }
        return Ok(ExitCode::SUCCESS);
    }
    let version = order.first().map(|p| p.version.clone()).unwrap_or_default();
    let mut problems = Vec::new();
    for p in &order {
        problems.extend(package_problems(root, &ws, p, &version));
    }
    problems.extend(version_problems(root, &version)?);
    problems.extend(changelog_problems(root, &version)?);
    let names: Vec<&str> = order.iter().map(|p| p.name.as_str()).collect();
    println!(
        "release-check: version {version}; publish order: {}",
        names.join(" ")
    );
    if problems.is_empty() {
        println!("release-check: ok");
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("release-check: {p}");
    }
    Ok(ExitCode::FAILURE)
}

fn package_problems(root: &Path, ws: &Workspace, p: &Package, version: &str) -> Vec<String> {
    let mut out = Vec::new();
    let n = &p.name;
    if p.version != version {
        out.push(format!(
            "{n} is at version {}, the others at {version}",
            p.version
        ));
    }
    for key in [
        "description",
        "license",
        "repository",
        "readme",
        "documentation",
    ] {
        if p.meta[key].as_str().is_none_or(str::is_empty) {
            out.push(format!("{n} has no `{key}` in its Cargo.toml"));
        }
    }
    if let Some(repo) = p.meta["repository"].as_str() {
        if !repo.starts_with("https://github.com/") || repo.contains("example") {
            out.push(format!(
                "{n}: repository {repo:?} is not the project's repository"
            ));
        }
    }
    for (key, max) in [("keywords", 5), ("categories", 5)] {
        let len = p.meta[key].as_array().map_or(0, Vec::len);
        if len == 0 || len > max {
            out.push(format!("{n} has {len} {key} (crates.io takes 1 to {max})"));
        }
    }
    if let Some(readme) = p.meta["readme"].as_str() {
        if !p.manifest_dir.join(readme).is_file() {
            out.push(format!("{n}: its readme {readme} does not exist"));
        }
    }
    let license = fs::read(root.join("LICENSE")).unwrap_or_default();
    if license.is_empty() || fs::read(p.manifest_dir.join("LICENSE")).ok() != Some(license) {
        out.push(format!(
            "{n}: no LICENSE beside its Cargo.toml with the repository's LICENSE (a symlink to ../../LICENSE)"
        ));
    }
    for (dep, req) in &p.internal_deps {
        let target = ws.packages.iter().find(|q| &q.name == dep);
        match target {
            Some(q) if !q.published => out.push(format!(
                "{n} depends on {dep}, which is not published (publish = false): it cannot be published"
            )),
            Some(q) if req == "*" || !requirement_accepts(req, &q.version) => out.push(format!(
                "{n} depends on {dep} by {req:?}, which does not accept its version {}",
                q.version
            )),
            _ => {}
        }
    }
    out
}

/// Whether a caret requirement (`^0.1.0`, `0.1`, `=0.1.0`) accepts `v`.
fn requirement_accepts(req: &str, v: &str) -> bool {
    let req = req.trim();
    if let Some(exact) = req.strip_prefix('=') {
        return exact.trim() == v;
    }
    let want: Vec<&str> = req.trim_start_matches('^').split('.').collect();
    let have: Vec<&str> = v.split('.').collect();
    // Caret: the leading components up to the first non-zero one must be
    // equal; the rest of the given components must not be higher.
    let mut significant = true;
    for (i, w) in want.iter().enumerate() {
        let Some(h) = have.get(i) else { return false };
        let (wn, hn) = (w.parse::<u64>().unwrap_or(0), h.parse::<u64>().unwrap_or(0));
        if significant && wn != hn {
            return false;
        }
        if !significant && hn < wn {
            return false;
        }
        if wn != 0 {
            significant = false;
        }
    }
    true
}

fn version_problems(root: &Path, version: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let images = fs::read_to_string(root.join("deploy/images.yaml"))
        .context("reading deploy/images.yaml")?;
    if !images
        .lines()
        .any(|l| l.trim() == format!("version: \"{version}\""))
    {
        out.push(format!(
            "deploy/images.yaml: its version is not \"{version}\""
        ));
    }
    let mut files: Vec<String> = VERSIONED_FILES.iter().map(|s| (*s).to_owned()).collect();
    for dir in ["docs", "crates", "tools", "plugins"] {
        collect_markdown(&root.join(dir), root, &mut files)?;
    }
    for f in files {
        let Ok(text) = fs::read_to_string(root.join(&f)) else {
            continue;
        };
        for (no, line) in text.lines().enumerate() {
            if let Some((name, req)) = nri_requirement(line) {
                if !requirement_accepts(&req, version) {
                    out.push(format!(
                        "{f}:{}: {name} = {req:?} does not accept {version}",
                        no + 1
                    ));
                }
            }
        }
    }
    Ok(out)
}

/// `nri-plugin = "0.1"` or `nri-plugin = { version = "0.1", ... }`.
fn nri_requirement(line: &str) -> Option<(String, String)> {
    let line = line.trim().trim_start_matches('+');
    let (name, rest) = line.split_once('=')?;
    let name = name.trim();
    if !name.starts_with("nri-") || name.contains(' ') {
        return None;
    }
    let rest = rest.trim();
    let value = match rest.strip_prefix('{') {
        Some(table) => table.split("version").nth(1)?.split('"').nth(1)?,
        None => rest.strip_prefix('"')?.split('"').next()?,
    };
    value
        .chars()
        .next()
        .filter(|c| c.is_ascii_digit() || *c == '^' || *c == '=')
        .map(|_| (name.to_owned(), value.to_owned()))
}

fn collect_markdown(dir: &Path, root: &Path, out: &mut Vec<String>) -> Result<()> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Ok(());
    };
    for e in entries {
        let path = e?.path();
        if path.is_dir() {
            if !path.ends_with("target") {
                collect_markdown(&path, root, out)?;
            }
        } else if path.extension().is_some_and(|x| x == "md") {
            if let Ok(rel) = path.strip_prefix(root) {
                out.push(rel.to_string_lossy().into_owned());
            }
        }
    }
    Ok(())
}

fn changelog_problems(root: &Path, version: &str) -> Result<Vec<String>> {
    let text = fs::read_to_string(root.join("CHANGELOG.md")).context("reading CHANGELOG.md")?;
    let mut out = Vec::new();
    match changelog::section(&text, "Unreleased") {
        None => out.push("CHANGELOG.md has no [Unreleased] section".to_owned()),
        Some(s) => {
            let headers = changelog::FAMILIES
                .iter()
                .map(|(h, _)| *h)
                .chain([changelog::SAMPLES]);
            for h in headers {
                if !s.lines().any(|l| l.starts_with(h)) {
                    out.push(format!("CHANGELOG.md: [Unreleased] has no `{h}` section"));
                }
            }
        }
    }
    let tag = format!("v{version}");
    let tagged = Command::new("git")
        .current_dir(root)
        .args(["rev-parse", "-q", "--verify", &format!("refs/tags/{tag}")])
        .output()
        .is_ok_and(|o| o.status.success());
    // Until its tag exists, a version's entries may still be under
    // [Unreleased] (the release procedure folds them into its section).
    match changelog::header_line(&text, version) {
        None if tagged => out.push(format!("CHANGELOG.md has no [{version}] section")),
        None => println!(
            "release-check: CHANGELOG.md has no [{version}] section yet (the release procedure makes it)"
        ),
        Some(h) if tagged && !changelog::has_date(h) => out.push(format!(
            "CHANGELOG.md: the tag {tag} exists but `{h}` has no date (YYYY-MM-DD)"
        )),
        Some(_) => {}
    }
    let has_section = changelog::header_line(&text, version).is_some();
    for link in ["[Unreleased]: ".to_owned(), format!("[{version}]: ")] {
        let needed = link.starts_with("[Unreleased]") || has_section;
        if needed && !text.lines().any(|l| l.starts_with(&link)) {
            out.push(format!("CHANGELOG.md has no link reference `{link}...`"));
        }
    }
    if !tagged {
        println!("release-check: the tag {tag} is not placed yet (docs/dev/RELEASING.md)");
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caret_requirements() {
        assert!(requirement_accepts("^0.1.0", "0.1.0"));
        assert!(requirement_accepts("0.1", "0.1.3"));
        assert!(!requirement_accepts("0.1", "0.2.0"));
        assert!(!requirement_accepts("^0.1.4", "0.1.3"));
        assert!(requirement_accepts("1", "1.7.0"));
        assert!(!requirement_accepts("1.2", "1.1.0"));
        assert!(requirement_accepts("=0.1.0", "0.1.0"));
        assert!(!requirement_accepts("=0.1.0", "0.1.1"));
    }

    #[test]
    fn requirements_in_text() {
        assert_eq!(
            nri_requirement("nri-plugin = \"0.1\""),
            Some(("nri-plugin".into(), "0.1".into()))
        );
        assert_eq!(
            nri_requirement("nri-api = { version = \"0.1.0\", features = [\"serde\"] }"),
            Some(("nri-api".into(), "0.1.0".into()))
        );
        assert_eq!(nri_requirement("nri-plugin.workspace = true"), None);
        assert_eq!(nri_requirement("nri-test-support = { path = \"x\" }"), None);
        assert_eq!(nri_requirement("name = \"nri-x\""), None);
    }
}
