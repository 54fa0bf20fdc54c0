//! `docs/plugin-authors.md` runs as written: every `sh` block of the page,
//! in order, in one shell in an empty directory, with this workspace's
//! `nri` on `PATH` and the scaffolded crate's `nri-*` dependencies patched
//! onto this checkout's crates (offline, so nothing is fetched). Blocks
//! that need a node or a cluster are fenced as `sh cluster`; they are
//! counted here (the page and this test change together) and run by the
//! `cluster` module on the e2e tests' one-node Kubernetes cluster (an image
//! built offline and imported; the page's `kubectl` block as written).
//!
//! Between blocks the test links the scaffold's `target` to the shared
//! target dir (the scenario names `./target/debug/scratch`) and gives it
//! this workspace's `Cargo.lock` (the dependencies already compiled), so
//! a run costs the scaffold's own build, not its dependencies'.
//!
//! The counting test always runs; running the page needs `NRI_E2E=1` (the
//! full suite) or `NRI_DOC_TEST=1`. Budget: 10 minutes on a loaded 2-core
//! machine (most of it compiling the scaffold with the nri-* crates).

#![allow(clippy::unwrap_used, clippy::panic)]

use std::fmt::Write as _;
use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, bail, ensure};
use nri_e2e_tests::{
    Target, check_budget, plugin_binary, profile_dir, run_with_deadline, workspace_root,
};

const PAGE: &str = "docs/plugin-authors.md";
/// Shell blocks that run on any machine.
const LOCAL_BLOCKS: usize = 8;
/// Shell blocks that need a node or a cluster (fenced `sh cluster`).
const CLUSTER_BLOCKS: usize = 5;
const BUDGET: Duration = Duration::from_secs(600);
/// The crates a plugin crate depends on, patched onto this checkout.
const PATCHED: [&str; 5] = [
    "nri-plugin",
    "nri-plugin-macros",
    "nri-api",
    "nri-mux",
    "nri-ttrpc",
];

/// A fenced shell block of the page.
#[derive(Debug)]
struct Block {
    /// 1-based line of its opening fence.
    line: usize,
    /// Fenced `sh cluster`.
    cluster: bool,
    text: String,
}

/// The `sh` blocks of `md`; any other info string after `sh` is an error.
fn shell_blocks(md: &str) -> Result<Vec<Block>> {
    let mut blocks = Vec::new();
    // Inside a shell block (collected) or another block (skipped).
    let mut shell: Option<Block> = None;
    let mut other = false;
    for (i, line) in md.lines().enumerate() {
        let fence = line.trim_start().strip_prefix("```");
        if let Some(b) = shell.as_mut() {
            if fence.is_some_and(|f| f.trim().is_empty()) {
                blocks.extend(shell.take());
            } else {
                b.text.push_str(line);
                b.text.push('\n');
            }
            continue;
        }
        let Some(info) = fence else {
            continue;
        };
        if other {
            other = false;
            continue;
        }
        let words: Vec<&str> = info.split_whitespace().collect();
        match words.as_slice() {
            ["sh" | "bash" | "shell", tags @ ..] => {
                let cluster = match tags {
                    [] => false,
                    ["cluster"] => true,
                    _ => bail!("line {}: unknown shell block tags {tags:?}", i + 1),
                };
                shell = Some(Block {
                    line: i + 1,
                    cluster,
                    text: String::new(),
                });
            }
            [] => bail!("line {}: a fence without a language", i + 1),
            _ => other = true,
        }
    }
    ensure!(shell.is_none() && !other, "an unclosed block");
    Ok(blocks)
}

fn page() -> Result<String> {
    let path = workspace_root().join(PAGE);
    fs::read_to_string(&path).with_context(|| path.display().to_string())
}

#[test]
fn the_page_has_the_counted_shell_blocks() {
    let blocks = shell_blocks(&page().unwrap()).unwrap();
    let cluster = blocks.iter().filter(|b| b.cluster).count();
    assert_eq!(
        (blocks.len() - cluster, cluster),
        (LOCAL_BLOCKS, CLUSTER_BLOCKS),
        "{PAGE} changed: update the counts (and what stands in for the cluster blocks)"
    );
    // What needs a cluster is marked so.
    for b in blocks.iter().filter(|b| !b.cluster) {
        for word in ["kubectl", "podman", "sudo", "journalctl"] {
            assert!(
                !b.text.contains(word),
                "{PAGE}:{}: {word} in a block not fenced `sh cluster`",
                b.line
            );
        }
    }
}

#[test]
fn the_fence_parser_counts_and_refuses() {
    let md = "a\n```sh\necho 1\n```\n```yaml\nk: v\n```\n```sh cluster\nkubectl x\n```\n```text\nx\n```\n";
    let b = shell_blocks(md).unwrap();
    assert_eq!(b.len(), 2);
    assert_eq!((b[0].cluster, b[0].text.as_str()), (false, "echo 1\n"));
    assert_eq!((b[1].cluster, b[1].line), (true, 8));
    assert!(shell_blocks("```sh node\nx\n```\n").is_err());
    assert!(shell_blocks("```sh\nx\n").is_err());
}

/// The script that runs the local blocks of the page in `dir`.
fn script(blocks: &[Block], dir: &Path, target: &Path, lock: &Path) -> String {
    let q = |p: &Path| format!("'{}'", p.display());
    let mut s = format!("set -e\ncd {}\n", q(dir));
    for (n, b) in blocks.iter().filter(|b| !b.cluster).enumerate() {
        let _ = writeln!(s, "echo '=== block {} (line {})'", n + 1, b.line);
        s.push_str(&b.text);
        // The scaffold builds into the shared target dir, on the locked
        // versions of this workspace.
        let scaffold = dir.join("scratch");
        let _ = writeln!(
            s,
            "if [ -d {sc} ] && [ ! -e {sc}/target ]; then ln -s {t} {sc}/target; cp {l} {sc}/Cargo.lock; fi",
            sc = q(&scaffold),
            t = q(target),
            l = q(lock),
        );
    }
    s.push_str("echo '=== done'\n");
    s
}

/// Runs the local blocks of the page in a fresh directory; returns the
/// directory (the scaffold is its `work/scratch`).
fn run_local() -> Result<std::path::PathBuf> {
    // The page's scaffold is built into the shared target dir under one
    // name: one run at a time in this test binary.
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _one = ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let blocks = shell_blocks(&page()?)?;
    let nri = plugin_binary("nri-cli", Target::Bin, "nri")?;
    let root = workspace_root().canonicalize()?;
    let target = profile_dir()?
        .parent()
        .context("no target dir")?
        .to_path_buf();
    let dir = tempfile_dir()?;
    let cargo_dir = dir.join(".cargo");
    fs::create_dir_all(&cargo_dir)?;
    let mut config = String::from("[net]\noffline = true\n\n[patch.crates-io]\n");
    for c in PATCHED {
        let _ = writeln!(
            config,
            "{c} = {{ path = \"{}\" }}",
            root.join("crates").join(c).display()
        );
    }
    fs::write(cargo_dir.join("config.toml"), config)?;
    let work = dir.join("work");
    fs::create_dir_all(&work)?;
    let text = script(&blocks, &work, &target, &root.join("Cargo.lock"));
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![nri.parent().context("nri has no directory")?.to_path_buf()];
    dirs.extend(std::env::split_paths(&path));
    let mut cmd = Command::new("bash");
    cmd.arg("-c")
        .arg(&text)
        .env("PATH", std::env::join_paths(dirs)?)
        .env("CARGO_TARGET_DIR", &target)
        .env("CARGO_INCREMENTAL", "0")
        .env("NO_COLOR", "1")
        .env_remove("RUST_LOG")
        .env_remove("RUSTFLAGS");
    let out = run_with_deadline(cmd, &dir, BUDGET)?;
    ensure!(
        out.status.success() && out.stdout.contains("=== done"),
        "{PAGE} failed ({}):\n{}\n--- stderr ---\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    // What the page promises the reader sees.
    for needle in [
        "wrote ",
        "expectations held",
        "changed 50-scratch",
        "\"type\":\"summary\"",
        "FAILED 50-scratch",
    ] {
        ensure!(
            out.stdout.contains(needle) || out.stderr.contains(needle),
            "{needle:?} not in the output of {PAGE}:\n{}\n--- stderr ---\n{}",
            out.stdout,
            out.stderr
        );
    }
    Ok(dir)
}

/// A fresh directory under the system's temporary directory.
fn tempfile_dir() -> Result<std::path::PathBuf> {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("nri-doc-{}-{nanos}", std::process::id()));
    fs::create_dir(&dir)?;
    Ok(dir)
}

#[test]
fn the_page_runs_as_written() {
    let on = |v: &str| std::env::var(v).as_deref() == Ok("1");
    if !on("NRI_E2E") && !on("NRI_DOC_TEST") {
        eprintln!("the_page_runs_as_written: skipped: set NRI_DOC_TEST=1 (or NRI_E2E=1)");
        return;
    }
    let t0 = Instant::now();
    match run_local() {
        Ok(dir) => {
            let _ = fs::remove_dir_all(dir);
        }
        Err(e) => panic!("{e:#}"),
    }
    check_budget("the_page_runs_as_written", t0.elapsed(), BUDGET);
}

#[path = "plugin_authors/cluster.rs"]
mod cluster;
