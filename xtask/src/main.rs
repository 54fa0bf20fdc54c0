//! Project automation.
//!
//! `cargo xtask codegen` regenerates the Rust types of the NRI protocol from
//! `crates/nri-api/proto` into `crates/nri-api/src/generated/` (committed),
//! with the table of message shapes that `nri_api::scan` walks, the method
//! names and the `Plugin` service's handler trait and dispatcher; and the
//! runtime's typed event wrappers into `crates/nri-runtime/src/generated/`.
//! `cargo xtask codegen --check` regenerates into a temporary directory and
//! fails if the committed files differ, so CI catches a schema change whose
//! generated code was not committed.
//!
//! `cargo xtask public-api` checks the public API of the published crates
//! against committed snapshots and the last release (see `public_api`);
//! `cargo xtask release-check` what a release needs beyond `cargo package`
//! (see `release`).
//!
//! Code generation uses `protox` (a pure-Rust protobuf compiler, no `protoc`
//! binary) and `prost-build`.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, Result};
use prost::Message;

mod api_render;
mod api_types;
mod changelog;
mod public_api;
mod release;
mod scan_schema;
mod services;
mod workspace;

/// Proto include root, relative to the repository root.
const PROTO_ROOT: &str = "crates/nri-api/proto";
/// Schema files compiled, relative to [`PROTO_ROOT`].
const PROTO_FILES: &[&str] = &["nri/pkg/api/v1alpha1/api.proto"];
/// Output directory of generated code, relative to the repository root.
const GENERATED_DIR: &str = "crates/nri-api/src/generated";
/// Output directory of the runtime's generated code.
const RUNTIME_GENERATED_DIR: &str = "crates/nri-runtime/src/generated";
/// Every output directory: its files are all generated (a file there that
/// is not generated any more is removed).
const OUTPUT_DIRS: &[&str] = &[GENERATED_DIR, RUNTIME_GENERATED_DIR];
/// File name of the encoded `FileDescriptorSet` written next to the code.
const DESCRIPTOR_FILE: &str = "nri_api_descriptor.bin";

/// Attributes put on every generated message.
const MESSAGE_ATTRS: &str = concat!(
    "#[cfg_attr(feature = \"serde\", derive(::serde::Serialize, ::serde::Deserialize))]\n",
    "#[cfg_attr(feature = \"serde\", serde(default))]"
);
/// Attributes put on every generated enum.
const ENUM_ATTRS: &str =
    "#[cfg_attr(feature = \"serde\", derive(::serde::Serialize, ::serde::Deserialize))]";

fn main() -> ExitCode {
    match run() {
        Ok(code) => code,
        Err(err) => {
            eprintln!("xtask: error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

fn usage() -> &'static str {
    "usage: cargo xtask codegen [--check] | public-api [--bless] [-p CRATE]... | release-check [--order]\n\n  codegen              regenerate crates/nri-api/src/generated from the .proto schema\n  codegen --check      fail if the committed generated code is out of date\n  public-api           the public API of each published library against public-api/*.txt\n                       and against the last release tag (skipped before the first snapshot)\n  public-api --bless   rewrite public-api/*.txt from the current code\n  public-api -p CRATE  only these crates (repeatable)\n  release-check        versions, crate metadata, publish order and CHANGELOG.md of a release\n  release-check --order  only the publish order, one crate a line\n  checker [ARGS]       the fault-schedule checker in a release build: nri-checker ARGS\n                       (default: run --time 3600 --mode both, an hour of seeds from 100000)"
}

fn run() -> Result<ExitCode> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["codegen"] => {
            codegen_write()?;
            Ok(ExitCode::SUCCESS)
        }
        ["codegen", "--check"] => codegen_check(),
        ["public-api", rest @ ..] => public_api::run_args(&repo_root()?, rest),
        ["release-check"] => release::run(&repo_root()?, false),
        ["release-check", "--order"] => release::run(&repo_root()?, true),
        ["checker", rest @ ..] => checker(rest),
        ["help"] | ["--help"] | ["-h"] => {
            println!("{}", usage());
            Ok(ExitCode::SUCCESS)
        }
        _ => {
            eprintln!("{}", usage());
            Ok(ExitCode::from(2))
        }
    }
}

/// `cargo xtask checker [ARGS]`: the fault-schedule checker (`nri-checker`,
/// docs/reliability.md) in a release build, for long runs; without
/// arguments an hour of seeds past the ones CI runs.
fn checker(args: &[&str]) -> Result<ExitCode> {
    const DEFAULT: &[&str] = &[
        "run", "--time", "3600", "--mode", "both", "--start", "100000",
    ];
    let args = if args.is_empty() { DEFAULT } else { args };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let status = std::process::Command::new(cargo)
        .args(["run", "--release", "--package", "nri-checker", "--"])
        .args(args)
        .current_dir(repo_root()?)
        .status()
        .context("running cargo run -p nri-checker")?;
    Ok(match status.code() {
        Some(0) => ExitCode::SUCCESS,
        Some(c) => ExitCode::from(u8::try_from(c).unwrap_or(1)),
        None => ExitCode::FAILURE,
    })
}

/// Repository root: the parent of this crate's manifest directory.
fn repo_root() -> Result<PathBuf> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .parent()
        .map(Path::to_path_buf)
        .context("xtask manifest directory has no parent")
}

/// Formats generated source with rustfmt (as the rest of the tree).
fn rustfmt(source: &str) -> Result<Vec<u8>> {
    use std::io::Write as _;
    let mut child = std::process::Command::new("rustfmt")
        .args(["--edition", "2024", "--emit", "stdout"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .context("running rustfmt")?;
    child
        .stdin
        .take()
        .context("rustfmt stdin")?
        .write_all(source.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        anyhow::bail!("rustfmt failed on generated code:\n{source}");
    }
    Ok(out.stdout)
}

/// Generates every output file: one directory under `out` per entry of
/// [`OUTPUT_DIRS`] (its index as the name).
fn generate_all(root: &Path, out: &Path) -> Result<()> {
    let api = out.join("0");
    let runtime = out.join("1");
    fs::create_dir_all(&api)?;
    fs::create_dir_all(&runtime)?;
    let fds = generate_into(root, &api)?;
    fs::write(
        api.join(services::METHODS_FILE),
        rustfmt(&services::methods(&fds)?)?,
    )?;
    fs::write(
        api.join(services::PLUGIN_SERVICE_FILE),
        rustfmt(&services::plugin_service(&fds)?)?,
    )?;
    fs::write(
        runtime.join(services::EVENT_WRAPPERS_FILE),
        rustfmt(&services::event_wrappers(&fds)?)?,
    )?;
    Ok(())
}

/// Generates nri-api's output files into `out_dir` (which must exist and
/// be empty); the schema compiled.
fn generate_into(root: &Path, out_dir: &Path) -> Result<prost_types::FileDescriptorSet> {
    let proto_root = root.join(PROTO_ROOT);
    let files: Vec<PathBuf> = PROTO_FILES.iter().map(|f| proto_root.join(f)).collect();
    let fds = protox::compile(&files, [&proto_root])
        .map_err(|e| anyhow::anyhow!("{e:?}"))
        .context("compiling the protobuf schema with protox")?;

    let mut config = prost_build::Config::new();
    config
        .out_dir(out_dir)
        .btree_map(["."])
        .enable_type_names()
        .message_attribute(".", MESSAGE_ATTRS)
        .enum_attribute(".", ENUM_ATTRS);
    config
        .compile_fds(fds.clone())
        .context("generating Rust code with prost-build")?;
    fs::write(
        out_dir.join(scan_schema::FILE),
        scan_schema::generate(&fds).context("generating the scan schema")?,
    )
    .context("writing the scan schema")?;

    // The embedded descriptor carries no comments or source positions: it
    // only describes the schema, and stays small and stable.
    let mut stripped = fds;
    for file in &mut stripped.file {
        file.source_code_info = None;
    }
    fs::write(out_dir.join(DESCRIPTOR_FILE), stripped.encode_to_vec())
        .context("writing the encoded FileDescriptorSet")?;
    Ok(stripped)
}

/// Reads every regular file of `dir` into a name -> bytes map.
fn read_dir_files(dir: &Path) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    if !dir.exists() {
        return Ok(out);
    }
    for entry in fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        let data = fs::read(entry.path())
            .with_context(|| format!("reading {}", entry.path().display()))?;
        out.insert(name, data);
    }
    Ok(out)
}

/// Every file of every output directory, keyed by its path from the
/// repository root: as generated under `fresh` (from [`generate_all`]),
/// or as committed under `root`.
fn output_files(base: &Path, fresh: bool) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut out = BTreeMap::new();
    for (i, dir) in OUTPUT_DIRS.iter().enumerate() {
        let from = if fresh {
            base.join(i.to_string())
        } else {
            base.join(dir)
        };
        for (name, data) in read_dir_files(&from)? {
            out.insert(format!("{dir}/{name}"), data);
        }
    }
    Ok(out)
}

fn codegen_write() -> Result<()> {
    let root = repo_root()?;
    let tmp = tempfile::tempdir().context("creating a temporary directory")?;
    generate_all(&root, tmp.path())?;

    for dir in OUTPUT_DIRS {
        let target = root.join(dir);
        fs::create_dir_all(&target).with_context(|| format!("creating {}", target.display()))?;
    }
    let fresh = output_files(tmp.path(), true)?;
    for stale in output_files(&root, false)?.keys() {
        if !fresh.contains_key(stale) {
            fs::remove_file(root.join(stale)).with_context(|| format!("removing stale {stale}"))?;
        }
    }
    for (name, data) in &fresh {
        fs::write(root.join(name), data).with_context(|| format!("writing {name}"))?;
        println!("wrote {name}");
    }
    Ok(())
}

fn codegen_check() -> Result<ExitCode> {
    let root = repo_root()?;
    let tmp = tempfile::tempdir().context("creating a temporary directory")?;
    generate_all(&root, tmp.path())?;

    let fresh = output_files(tmp.path(), true)?;
    let committed = output_files(&root, false)?;
    let mut problems = Vec::new();
    for (name, data) in &fresh {
        match committed.get(name) {
            None => problems.push(format!("missing: {name}")),
            Some(old) if old != data => problems.push(format!("differs: {name}")),
            Some(_) => {}
        }
    }
    for name in committed.keys() {
        if !fresh.contains_key(name) {
            problems.push(format!("not generated any more: {name}"));
        }
    }
    if problems.is_empty() {
        println!("codegen: {} are up to date", OUTPUT_DIRS.join(", "));
        return Ok(ExitCode::SUCCESS);
    }
    for p in &problems {
        eprintln!("codegen: {p}");
    }
    eprintln!(
        "codegen: generated code is out of date with {PROTO_ROOT}; run `cargo xtask codegen` and commit the result"
    );
    if problems.iter().any(|p| p.starts_with("differs")) {
        // Show where the first difference is, to help reviewing.
        show_first_difference(&fresh, &committed);
    }
    Ok(ExitCode::FAILURE)
}

fn show_first_difference(fresh: &BTreeMap<String, Vec<u8>>, old: &BTreeMap<String, Vec<u8>>) {
    for (name, new) in fresh {
        let Some(prev) = old.get(name) else { continue };
        if prev == new || name.ends_with(".bin") {
            continue;
        }
        let new = String::from_utf8_lossy(new);
        let prev = String::from_utf8_lossy(prev);
        let line = new
            .lines()
            .zip(prev.lines())
            .position(|(a, b)| a != b)
            .unwrap_or_else(|| new.lines().count().min(prev.lines().count()));
        eprintln!("codegen: {name}: first difference at line {}", line + 1);
        return;
    }
}
