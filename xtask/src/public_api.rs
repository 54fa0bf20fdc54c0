//! `cargo xtask public-api [--bless]`: the public API of every published
//! library crate, rendered from rustdoc's JSON output ([`api_render`]),
//! against the committed snapshot in `public-api/<crate>.txt`, and against
//! the snapshot of the last release tag (`v*`).
//!
//! - Every change of a public API shows in the diff of the commit that
//!   makes it: the check fails until `--bless` rewrote the snapshot.
//! - A breaking change since the last release (an item removed or changed,
//!   a required trait item, a field of a struct built with literals, a
//!   variant of an exhaustive enum added) also needs a semver-incompatible
//!   version and an entry in CHANGELOG.md's `[Unreleased]` section.
//! - Before the first snapshot is taken (by the release procedure, see
//!   docs/dev/RELEASING.md) the check says so and passes without building
//!   anything, and without a release tag the comparison with the last
//!   release is skipped.
//!
//! rustdoc's JSON output is unstable: it comes from the stable toolchain
//! with `RUSTC_BOOTSTRAP=1` on that one rustdoc invocation (the toolchain
//! the project builds with, so the format moves only when it does). Cargo
//! counts that variable in its fingerprints, so the dependencies are
//! checked once more for it, in a target directory of their own
//! (`<target>/public-api`): sharing the main one would rebuild them there
//! at every switch between `cargo doc` and this check.
//!
//! [`api_render`]: crate::api_render

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use anyhow::{Context, Result, bail};

use crate::api_render::{Line, render};
use crate::changelog;
use crate::workspace::{Package, Workspace, is_breaking_bump, next_breaking};

/// The snapshot directory, relative to the repository root.
pub const SNAPSHOT_DIR: &str = "public-api";

/// `cargo xtask public-api [--bless] [-p CRATE]...`.
pub fn run_args(root: &Path, args: &[&str]) -> Result<ExitCode> {
    let mut bless = false;
    let mut only = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match *a {
            "--bless" => bless = true,
            "-p" | "--package" => {
                only.push(it.next().context("-p needs a crate name")?.to_string());
            }
            other => bail!("public-api: unknown argument {other:?}"),
        }
    }
    run(root, bless, &only)
}

/// The check, or with `bless` the snapshots written; `only` limits both
/// to these crates (all published libraries when empty).
pub fn run(root: &Path, bless: bool, only: &[String]) -> Result<ExitCode> {
    let ws = Workspace::load(root)?;
    let crates: Vec<&Package> = ws
        .publish_order()?
        .into_iter()
        .filter(|p| p.lib.is_some() && (only.is_empty() || only.contains(&p.name)))
        .collect();
    if crates.len() < only.len() {
        bail!("public-api: -p names a crate that is not a published library: {only:?}");
    }
    let dir = root.join(SNAPSHOT_DIR);
    if !bless && !has_snapshots(&dir)? {
        if let Some(tag) = last_release(root)? {
            eprintln!(
                "public-api: the release {tag} exists but {SNAPSHOT_DIR}/ has no snapshot: take it with \
                 `cargo xtask public-api --bless` (docs/dev/RELEASING.md) and commit it"
            );
            return Ok(ExitCode::FAILURE);
        }
        println!(
            "public-api: no snapshot in {SNAPSHOT_DIR}/ yet (the release procedure takes the first one, \
             docs/dev/RELEASING.md): skipped"
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut current = Vec::new();
    for c in &crates {
        current.push(((*c).clone(), api_of(root, &ws, c)?));
    }
    if bless {
        return bless_all(&dir, &current, only.is_empty());
    }
    let mut problems = Vec::new();
    for (c, lines) in &current {
        problems.extend(against_snapshot(&dir, c, lines)?);
    }
    problems.extend(against_release(root, &current)?);
    if problems.is_empty() {
        println!("public-api: {} crates match their snapshots", current.len());
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("{p}\n");
    }
    Ok(ExitCode::FAILURE)
}

fn has_snapshots(dir: &Path) -> Result<bool> {
    if !dir.is_dir() {
        return Ok(false);
    }
    for e in fs::read_dir(dir)? {
        if e?.path().extension().is_some_and(|x| x == "txt") {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The rendered public API of one crate (with its docs.rs features).
fn api_of(root: &Path, ws: &Workspace, c: &Package) -> Result<Vec<Line>> {
    let lib = c.lib.as_deref().context("no library target")?;
    let target = ws.target_dir.join("public-api");
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(root)
        .args(["rustdoc", "-q", "-p", &c.name, "--lib", "--target-dir"])
        .arg(&target)
        .env("RUSTC_BOOTSTRAP", "1")
        .env_remove("RUSTDOCFLAGS");
    if !c.docs_features.is_empty() {
        cmd.args(["--features", &c.docs_features.join(",")]);
    }
    cmd.args(["--", "-Z", "unstable-options", "--output-format", "json"]);
    eprintln!("public-api: rustdoc JSON of {}", c.name);
    let status = cmd.status().context("running cargo rustdoc")?;
    if !status.success() {
        bail!("cargo rustdoc -p {} failed", c.name);
    }
    let file: PathBuf = target.join("doc").join(format!("{lib}.json"));
    let text = fs::read(&file).with_context(|| format!("reading {}", file.display()))?;
    let doc: serde_json::Value = serde_json::from_slice(&text).context("parsing rustdoc JSON")?;
    Ok(render(&doc))
}

fn header(c: &Package) -> String {
    format!(
        "# The public API of {} {} (cargo xtask public-api --bless; see docs/dev/RELEASING.md).",
        c.name, c.version
    )
}

/// Writes the snapshots; with `prune`, removes those of crates that are
/// no published library any more.
fn bless_all(dir: &Path, current: &[(Package, Vec<Line>)], prune: bool) -> Result<ExitCode> {
    fs::create_dir_all(dir)?;
    let mut keep = BTreeSet::new();
    for (c, lines) in current {
        let mut text = header(c);
        text.push('\n');
        for l in lines {
            text.push_str(&l.text);
            text.push('\n');
        }
        let name = format!("{}.txt", c.name);
        fs::write(dir.join(&name), text)?;
        println!(
            "public-api: wrote {SNAPSHOT_DIR}/{name} ({} lines)",
            lines.len()
        );
        keep.insert(name);
    }
    for e in fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name().to_string_lossy().into_owned();
        if prune && name.ends_with(".txt") && !keep.contains(&name) {
            fs::remove_file(e.path())?;
            println!(
                "public-api: removed {SNAPSHOT_DIR}/{name} (not a published library any more)"
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A snapshot's lines and the version its header names.
fn parse_snapshot(text: &str) -> (Option<String>, BTreeSet<String>) {
    let mut version = None;
    let mut lines = BTreeSet::new();
    for l in text.lines() {
        if let Some(h) = l.strip_prefix("# The public API of ") {
            version = h.split_whitespace().nth(1).map(str::to_owned);
        } else if !l.is_empty() && !l.starts_with("# ") {
            lines.insert(l.to_owned());
        }
    }
    (version, lines)
}

/// What changed from `old` to `new`: removed lines, added lines, and the
/// added lines that break users of an item that existed in `old`.
pub fn compare(old: &BTreeSet<String>, new: &[Line]) -> (Vec<String>, Vec<String>, Vec<String>) {
    let new_set: BTreeSet<&str> = new.iter().map(|l| l.text.as_str()).collect();
    let removed: Vec<String> = old
        .iter()
        .filter(|l| !new_set.contains(l.as_str()))
        .cloned()
        .collect();
    let added: Vec<&Line> = new.iter().filter(|l| !old.contains(&l.text)).collect();
    let breaking_added = added
        .iter()
        .filter(|l| matches!(&l.owner, Some((owner, true)) if old.contains(owner)))
        .map(|l| l.text.clone())
        .collect();
    (
        removed,
        added.iter().map(|l| l.text.clone()).collect(),
        breaking_added,
    )
}

fn listing(removed: &[String], added: &[String]) -> String {
    let mut s = String::new();
    for l in removed {
        s.push_str(&format!("\n  - {l}"));
    }
    for l in added {
        s.push_str(&format!("\n  + {l}"));
    }
    s
}

fn against_snapshot(dir: &Path, c: &Package, lines: &[Line]) -> Result<Vec<String>> {
    let file = dir.join(format!("{}.txt", c.name));
    let Ok(text) = fs::read_to_string(&file) else {
        return Ok(vec![format!(
            "public-api: {} has no snapshot ({SNAPSHOT_DIR}/{}.txt): run `cargo xtask public-api --bless` \
             and commit it",
            c.name, c.name
        )]);
    };
    let (version, old) = parse_snapshot(&text);
    let (removed, added, breaking_added) = compare(&old, lines);
    let mut out = Vec::new();
    if !removed.is_empty() || !added.is_empty() {
        let breaking = if removed.is_empty() && breaking_added.is_empty() {
            "additions only"
        } else {
            "removed or changed items, or additions that break users (marked `// required` or \
             `// exhaustive`): a breaking change"
        };
        out.push(format!(
            "public-api: the public API of {} differs from {SNAPSHOT_DIR}/{}.txt ({breaking}):{}\n\
             If the change is deliberate: `cargo xtask public-api --bless`, and commit the snapshot with \
             the change and its CHANGELOG.md entry (under [Unreleased], with the migration).",
            c.name,
            c.name,
            listing(&removed, &added)
        ));
    } else if version.as_deref() != Some(c.version.as_str()) {
        out.push(format!(
            "public-api: {SNAPSHOT_DIR}/{}.txt was taken at version {}, the crate is {}: run \
             `cargo xtask public-api --bless`",
            c.name,
            version.as_deref().unwrap_or("?"),
            c.version
        ));
    }
    Ok(out)
}

/// The last release tag (`v*`) merged into HEAD, if any.
fn last_release(root: &Path) -> Result<Option<String>> {
    let out = Command::new("git")
        .current_dir(root)
        .args([
            "tag",
            "--merged",
            "HEAD",
            "--list",
            "v[0-9]*",
            "--sort=-v:refname",
        ])
        .output()
        .context("running git tag")?;
    if !out.status.success() {
        bail!("git tag failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .next()
        .map(str::to_owned))
}

fn against_release(root: &Path, current: &[(Package, Vec<Line>)]) -> Result<Vec<String>> {
    let Some(tag) = last_release(root)? else {
        println!(
            "public-api: no release tag (v*) yet: the comparison with the last release is skipped"
        );
        return Ok(Vec::new());
    };
    let changelog =
        fs::read_to_string(root.join("CHANGELOG.md")).context("reading CHANGELOG.md")?;
    let unreleased = changelog::section(&changelog, "Unreleased").unwrap_or("");
    let mut out = Vec::new();
    for (c, lines) in current {
        let show = Command::new("git")
            .current_dir(root)
            .args(["show", &format!("{tag}:{SNAPSHOT_DIR}/{}.txt", c.name)])
            .output()
            .context("running git show")?;
        if !show.status.success() {
            println!(
                "public-api: {} is not in {tag}'s snapshots: a new crate",
                c.name
            );
            continue;
        }
        let (released, old) = parse_snapshot(&String::from_utf8_lossy(&show.stdout));
        let released = released.unwrap_or_else(|| tag.trim_start_matches('v').to_owned());
        let (removed, _, breaking_added) = compare(&old, lines);
        if removed.is_empty() && breaking_added.is_empty() {
            continue;
        }
        let family = changelog::family_of(&c.name).unwrap_or("###");
        let mut needs = Vec::new();
        if !is_breaking_bump(&released, &c.version) {
            needs.push(format!(
                "the version {} (workspace.package in Cargo.toml; it is {})",
                next_breaking(&released),
                c.version
            ));
        }
        if changelog::family_entries(unreleased, family) == 0 {
            needs.push(format!(
                "an entry with its migration under [Unreleased] > `{family}` in CHANGELOG.md"
            ));
        }
        if !needs.is_empty() {
            out.push(format!(
                "public-api: breaking change to {} since {tag} (version {released}):{}\nIt needs {}.",
                c.name,
                listing(&removed, &breaking_added),
                needs.join(" and ")
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(text: &str, owner: Option<(&str, bool)>) -> Line {
        Line {
            text: text.to_owned(),
            owner: owner.map(|(o, b)| (o.to_owned(), b)),
        }
    }

    #[test]
    fn additions_break_only_items_that_existed() {
        let old: BTreeSet<String> = [
            "pub trait a::T",
            "fn a::T::x(&self) // required",
            "pub fn a::f()",
        ]
        .into_iter()
        .map(str::to_owned)
        .collect();
        let new = vec![
            line("pub trait a::T", None),
            line(
                "fn a::T::x(&self) // required",
                Some(("pub trait a::T", true)),
            ),
            line(
                "const a::T::N: u32 // required",
                Some(("pub trait a::T", true)),
            ),
            line("pub trait a::U", None),
            line(
                "fn a::U::y(&self) // required",
                Some(("pub trait a::U", true)),
            ),
            line("fn a::T::p(&self)", Some(("pub trait a::T", false))),
        ];
        let (removed, added, breaking) = compare(&old, &new);
        assert_eq!(removed, ["pub fn a::f()"]);
        assert_eq!(added.len(), 4);
        assert_eq!(breaking, ["const a::T::N: u32 // required"]);
    }

    #[test]
    fn snapshot_header_names_the_version() {
        let (v, lines) = parse_snapshot(
            "# The public API of nri-api 0.1.0 (x).\n# a comment\npub mod nri_api::api\n\n#[non_exhaustive] pub enum nri_api::E\n",
        );
        assert_eq!(v.as_deref(), Some("0.1.0"));
        assert_eq!(lines.len(), 2);
    }
}
