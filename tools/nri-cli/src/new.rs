//! `nri new plugin NAME`: writes a standalone plugin crate that builds on
//! `nri-plugin` by version and passes `nri sim` with its own scenario.
//!
//! The files it writes are templates under `new/` (`@NAME@`, `@INDEX@`
//! and a few more placeholders filled in here); the method written for
//! each event is in `new/events.rs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};

use crate::{EXIT_OK, EXIT_USAGE};

mod events;

use events::{EVENTS, EventInfo};

/// `nri new`: start something new.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, clap::Subcommand)]
enum What {
    /// Write a plugin crate: Cargo.toml (nri-plugin by version), src/main.rs
    /// (one method per event, run with nri_plugin::Runner), scenario.yaml
    /// (for `nri sim`, with expectations), README.md, Containerfile and
    /// daemonset.yaml.
    #[command(
        after_help = "Examples:\n  nri new plugin my-plugin\n  nri new plugin pod-watcher --events RunPodSandbox,StopPodSandbox --index 30\n  nri new plugin everything --events all\n  cd my-plugin && cargo build && nri sim scenario.yaml"
    )]
    Plugin(PluginArgs),
}

/// `nri new plugin`.
#[derive(Debug, clap::Args)]
struct PluginArgs {
    /// The plugin's name: the crate, the binary and the name it registers
    /// with (letters, digits, `-` and `_`).
    name: String,
    /// The events it handles, comma-separated NRI event names (any case),
    /// or `all`.
    #[arg(long, value_delimiter = ',', default_value = "CreateContainer")]
    events: Vec<String>,
    /// Its two-digit index (its place in the call order).
    #[arg(long, default_value = "50")]
    index: String,
    /// The directory to create (default: NAME in the current directory).
    #[arg(long)]
    dir: Option<PathBuf>,
}

/// Runs `nri new`.
pub fn run(args: Args) -> ExitCode {
    let What::Plugin(p) = args.what;
    let dir = p.dir.clone().unwrap_or_else(|| PathBuf::from(&p.name));
    let files = match plugin_files(&p.name, &p.index, &p.events) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("nri new: error: {e:#}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    match write_files(&dir, &files) {
        Ok(()) => {
            println!(
                "wrote {} ({} files); next: cd {} && cargo build && nri sim scenario.yaml",
                dir.display(),
                files.len(),
                dir.display()
            );
            ExitCode::from(EXIT_OK)
        }
        Err(e) => {
            eprintln!("nri new: error: {e:#}");
            ExitCode::from(EXIT_USAGE)
        }
    }
}

/// Writes `files` under `dir`, which must not exist yet (nothing of the
/// user's is ever overwritten).
fn write_files(dir: &Path, files: &[(&'static str, String)]) -> anyhow::Result<()> {
    if dir.exists() {
        bail!("{} already exists", dir.display());
    }
    for (rel, text) in files {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("cannot create {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("cannot write {}", path.display()))?;
    }
    Ok(())
}

/// The events named in `names` (any case, or `all`), in lifecycle order.
fn select_events(names: &[String]) -> anyhow::Result<Vec<&'static EventInfo>> {
    let mut chosen: Vec<&str> = Vec::new();
    for n in names.iter().map(|n| n.trim()).filter(|n| !n.is_empty()) {
        if n.eq_ignore_ascii_case("all") {
            chosen.extend(EVENTS.iter().map(|e| e.name));
            continue;
        }
        let Some(e) = EVENTS.iter().find(|e| e.name.eq_ignore_ascii_case(n)) else {
            let valid: Vec<&str> = EVENTS.iter().map(|e| e.name).collect();
            bail!(
                "unknown event {n:?}; valid events: {} (or all)",
                valid.join(", ")
            );
        };
        chosen.push(e.name);
    }
    if chosen.is_empty() {
        bail!("no events: give at least one with --events");
    }
    Ok(EVENTS.iter().filter(|e| chosen.contains(&e.name)).collect())
}

fn check_name(name: &str) -> anyhow::Result<()> {
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !ok {
        bail!(
            "invalid plugin name {name:?}: letters, digits, '-' and '_', starting with a letter (it names the crate, the binary and the plugin)"
        );
    }
    Ok(())
}

fn check_index(index: &str) -> anyhow::Result<()> {
    if index.len() != 2 || !index.bytes().all(|b| b.is_ascii_digit()) {
        bail!("invalid plugin index {index:?}: exactly two digits, e.g. 50");
    }
    Ok(())
}

/// The files of a new plugin crate, by path relative to its directory.
pub(crate) fn plugin_files(
    name: &str,
    index: &str,
    events: &[String],
) -> anyhow::Result<Vec<(&'static str, String)>> {
    check_name(name)?;
    check_index(index)?;
    let events = select_events(events)?;
    let fill = |t: &str| t.replace("@NAME@", name).replace("@INDEX@", index);
    Ok(vec![
        ("Cargo.toml", fill(include_str!("new/Cargo.toml.tmpl"))),
        ("src/main.rs", fill(&main_rs(&events))),
        ("scenario.yaml", fill(&scenario(&events))),
        ("README.md", fill(include_str!("new/README.md.tmpl"))),
        (
            "Containerfile",
            fill(include_str!("new/Containerfile.tmpl")),
        ),
        (
            "daemonset.yaml",
            fill(include_str!("new/daemonset.yaml.tmpl")),
        ),
        (".gitignore", "/target\n".to_owned()),
    ])
}

/// The protocol types the methods of `events` name, as one `use` line.
fn api_uses(events: &[&EventInfo]) -> String {
    let has = |n: &str| events.iter().any(|e| e.name == n);
    let mut uses: Vec<&str> = Vec::new();
    if events
        .iter()
        .any(|e| e.name != "ValidateContainerAdjustment")
    {
        uses.push("PodSandbox");
    }
    if events
        .iter()
        .any(|e| e.name.contains("Container") && e.name != "ValidateContainerAdjustment")
    {
        uses.push("Container");
    }
    let by_event: [(&str, &[&str]); 5] = [
        (
            "CreateContainer",
            &["ContainerAdjustment", "CreateContainerResponse"],
        ),
        ("UpdatePodSandbox", &["LinuxResources"]),
        (
            "UpdateContainer",
            &["LinuxResources", "UpdateContainerResponse"],
        ),
        ("StopContainer", &["StopContainerResponse"]),
        (
            "ValidateContainerAdjustment",
            &["ValidateContainerAdjustmentRequest"],
        ),
    ];
    for (event, types) in by_event {
        if has(event) {
            uses.extend(types);
        }
    }
    uses.sort_unstable();
    uses.dedup();
    match uses.as_slice() {
        [one] => format!("use nri_plugin::api::{one};"),
        many => {
            let line = format!("use nri_plugin::api::{{{}}};", many.join(", "));
            if line.len() <= MAX_WIDTH {
                return line;
            }
            // Too long for one line: one item per position, lines filled
            // up to the width, as rustfmt lays out a long `use` list.
            let mut out = String::from("use nri_plugin::api::{\n");
            let mut cur = String::new();
            for item in many {
                let piece = format!("{item},");
                if !cur.is_empty() && 4 + cur.len() + 1 + piece.len() > MAX_WIDTH {
                    let _ = writeln!(out, "    {cur}");
                    cur.clear();
                }
                if !cur.is_empty() {
                    cur.push(' ');
                }
                cur.push_str(&piece);
            }
            let _ = writeln!(out, "    {cur}");
            out.push_str("};");
            out
        }
    }
}

/// rustfmt's default maximum line width, which the generated code keeps.
const MAX_WIDTH: usize = 100;

fn main_rs(events: &[&EventInfo]) -> String {
    let methods: Vec<&str> = events.iter().map(|e| e.method).collect();
    include_str!("new/main.rs.tmpl")
        .replace("@USES@", &api_uses(events))
        .replace("@METHODS@", &methods.join("\n"))
}

/// The scenario: one pod's lifecycle, the plugin registered, every event
/// it handles called, and what its CreateContainer changes (with the
/// plugin as the owner).
fn scenario(events: &[&EventInfo]) -> String {
    let mut expect = String::new();
    for e in events {
        let _ = write!(
            expect,
            "  - plugin: @NAME@\n    event: {}\n    min-calls: 1\n",
            e.name
        );
    }
    if events.iter().any(|e| e.name == "CreateContainer") {
        expect.push_str(
            "  - container: web/app\n    env: { CREATED_BY: @NAME@ }\n    owners:\n      env/CREATED_BY: @NAME@\n",
        );
    }
    include_str!("new/scenario.yaml.tmpl").replace("@EXPECT@\n", &expect)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn names(e: &[&EventInfo]) -> Vec<&'static str> {
        e.iter().map(|e| e.name).collect()
    }

    #[test]
    fn events_in_any_case_become_canonical_and_ordered() {
        let e = select_events(&["removepodsandbox".into(), "CreateContainer".into()]).unwrap();
        assert_eq!(names(&e), ["CreateContainer", "RemovePodSandbox"]);
        let e = select_events(&["CreateContainer".into(), "createcontainer".into()]).unwrap();
        assert_eq!(names(&e), ["CreateContainer"]);
        let err = select_events(&["stopcontainr".into()])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with("unknown event \"stopcontainr\"; valid events: RunPodSandbox, "),
            "{err}"
        );
    }

    #[test]
    fn all_is_every_event() {
        let e = select_events(&["All".into()]).unwrap();
        assert_eq!(e.len(), 14);
        assert_eq!(names(&e), EVENTS.iter().map(|e| e.name).collect::<Vec<_>>());
    }

    #[test]
    fn bad_names_and_indices_are_refused() {
        let ev = || vec!["CreateContainer".to_owned()];
        assert!(plugin_files("my plugin", "50", &ev()).is_err());
        assert!(plugin_files("-x", "50", &ev()).is_err());
        assert!(plugin_files("", "50", &ev()).is_err());
        assert!(plugin_files("ok", "5", &ev()).is_err());
        assert!(plugin_files("ok", "5a", &ev()).is_err());
        assert!(plugin_files("ok", "50", &[]).is_err());
        assert!(plugin_files("ok", "50", &ev()).is_ok());
    }

    #[test]
    fn the_crate_depends_on_nri_plugin_by_version_and_has_one_method_per_event() {
        let files = plugin_files(
            "pod-watch",
            "30",
            &["RunPodSandbox".into(), "StopPodSandbox".into()],
        )
        .unwrap();
        let get = |p: &str| &files.iter().find(|(f, _)| *f == p).unwrap().1;
        assert!(get("Cargo.toml").contains("nri-plugin = \"0.1\""));
        assert!(get("Cargo.toml").contains("name = \"pod-watch\""));
        assert!(!get("Cargo.toml").contains("path"));
        let main = get("src/main.rs");
        assert!(
            main.contains("async fn run_pod_sandbox") && main.contains("async fn stop_pod_sandbox")
        );
        assert!(!main.contains("create_container"));
        assert!(main.contains("use nri_plugin::api::PodSandbox;"));
        let sc = get("scenario.yaml");
        assert!(sc.contains("event: RunPodSandbox") && sc.contains("event: StopPodSandbox"));
        assert!(sc.contains("index: \"30\""));
        assert!(!sc.contains("CREATED_BY"));
        assert!(get("daemonset.yaml").contains("\"-idx\", \"30\""));
        for (path, text) in &files {
            assert!(!text.contains('@'), "{path} has a placeholder left: {text}");
        }
    }

    /// `text` as rustfmt (edition 2024, default settings) writes it.
    fn rustfmt(text: &str) -> String {
        use std::io::Write as _;
        use std::process::{Command, Stdio};
        let mut child = Command::new("rustfmt")
            .args(["--edition", "2024", "--emit", "stdout"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run rustfmt (rustup component add rustfmt): {e}"));
        child
            .stdin
            .take()
            .unwrap()
            .write_all(text.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    }

    #[test]
    fn generated_rust_is_rustfmt_clean() {
        let mut sets: Vec<(&str, Vec<String>)> = vec![
            ("my-plugin", vec!["CreateContainer".into()]),
            ("x", vec!["all".into()]),
            (
                "a-plugin-with-a-rather-long-name-for-the-line-widths",
                vec!["all".into()],
            ),
            (
                "pods",
                vec!["RunPodSandbox".into(), "StopPodSandbox".into()],
            ),
        ];
        sets.extend(EVENTS.iter().map(|e| ("one", vec![e.name.to_owned()])));
        for (name, events) in sets {
            let files = plugin_files(name, "50", &events).unwrap();
            let main = &files.iter().find(|(f, _)| *f == "src/main.rs").unwrap().1;
            let formatted = rustfmt(main);
            if *main != formatted {
                let first = main
                    .lines()
                    .zip(formatted.lines())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                panic!(
                    "main.rs of {name} {events:?} is not rustfmt-clean from line {}:\n{}\n--- rustfmt:\n{}",
                    first + 1,
                    main.lines()
                        .skip(first)
                        .take(6)
                        .collect::<Vec<_>>()
                        .join("\n"),
                    formatted
                        .lines()
                        .skip(first)
                        .take(6)
                        .collect::<Vec<_>>()
                        .join("\n"),
                );
            }
        }
    }

    #[test]
    fn create_container_is_expected_to_set_its_env_with_the_plugin_as_owner() {
        let files = plugin_files("envy", "50", &["CreateContainer".into()]).unwrap();
        let get = |p: &str| &files.iter().find(|(f, _)| *f == p).unwrap().1;
        let sc = get("scenario.yaml");
        assert!(sc.contains("env: { CREATED_BY: envy }"), "{sc}");
        assert!(sc.contains("env/CREATED_BY: envy"), "{sc}");
        assert!(get("src/main.rs").contains("add_env(\"CREATED_BY\", env!(\"CARGO_PKG_NAME\"))"));
        // Every type a method names is imported.
        let all = plugin_files("x", "50", &["all".into()]).unwrap();
        let main = &all.iter().find(|(f, _)| *f == "src/main.rs").unwrap().1;
        for t in [
            "LinuxResources",
            "UpdateContainerResponse",
            "StopContainerResponse",
        ] {
            assert!(
                main.contains(&format!("{t},")) || main.contains(&format!("{t}}}")),
                "{t}"
            );
        }
    }
}
