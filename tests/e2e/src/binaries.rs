//! Finding (or building once) the plugin executables the tests run.

use std::collections::HashSet;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use anyhow::{Result, anyhow, bail};

use crate::process::run_with_deadline;
use crate::workspace_root;

/// Where cargo put this test binary's siblings: `<target>/<profile>`
/// (the test runs from `<target>/<profile>/deps/<name>-<hash>`).
pub fn profile_dir() -> Result<PathBuf> {
    let exe = std::env::current_exe()?;
    let deps = exe
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", exe.display()))?;
    let dir = if deps.file_name().is_some_and(|n| n == "deps") {
        deps.parent()
            .ok_or_else(|| anyhow!("{} has no parent", deps.display()))?
    } else {
        deps
    };
    Ok(dir.to_path_buf())
}

/// Which target of a package holds a plugin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A `[[bin]]` target: `<target>/<profile>/<name>`.
    Bin,
    /// An example: `<target>/<profile>/examples/<name>`.
    Example,
}

/// Locates a plugin executable built by `cargo test --workspace` (which
/// builds every bin and example of the workspace): bins at
/// `<target>/<profile>/<name>`, examples at `<target>/<profile>/examples/<name>`,
/// next to this test binary. If it is missing (e.g. only this crate was
/// built), it is built once with `$CARGO build -p <package> [--bin|--example]
/// <name>` into the same target dir and profile. Set `NRI_E2E_REBUILD=1` to
/// always run that build (it is a no-op when up to date) and so never test a
/// stale binary.
pub fn plugin_binary(package: &str, target: Target, name: &str) -> Result<PathBuf> {
    static BUILT: Mutex<Option<HashSet<(String, Target, String)>>> = Mutex::new(None);
    // The time spent here (building, or waiting for another test's build)
    // is not the test's: `check_budget` leaves it out.
    let _building = BuildTimer(Instant::now());
    let profile = profile_dir()?;
    let path = match target {
        Target::Bin => profile.join(name),
        Target::Example => profile.join("examples").join(name),
    };
    let key = (package.to_owned(), target, name.to_owned());
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    let built = built.get_or_insert_with(HashSet::new);
    let rebuild = std::env::var("NRI_E2E_REBUILD").as_deref() == Ok("1");
    if (path.is_file() && !rebuild) || built.contains(&key) {
        if path.is_file() {
            return Ok(path);
        }
        bail!("{} missing even after building it", path.display());
    }
    let target_dir = profile
        .parent()
        .ok_or_else(|| anyhow!("{} has no parent", profile.display()))?;
    let profile_name = profile
        .file_name()
        .and_then(|n| n.to_str())
        .ok_or_else(|| anyhow!("bad profile dir {}", profile.display()))?;
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", target_dir)
        .args(["build", "-p", package]);
    match profile_name {
        "debug" => {}
        "release" => {
            cmd.arg("--release");
        }
        other => {
            cmd.args(["--profile", other]);
        }
    }
    cmd.arg(match target {
        Target::Bin => "--bin",
        Target::Example => "--example",
    })
    .arg(name);
    eprintln!("[e2e] building {package} {target:?} {name}: {cmd:?}");
    let t0 = Instant::now();
    let out = run_with_deadline(cmd, &std::env::temp_dir(), Duration::from_secs(900))?;
    built.insert(key);
    if !out.status.success() {
        bail!("cargo build of {package} {name} failed:\n{}", out.stderr);
    }
    eprintln!("[e2e] built {name} in {:.1?}", t0.elapsed());
    if !path.is_file() {
        bail!("{} missing after building it", path.display());
    }
    Ok(path)
}

thread_local! {
    /// Time this thread spent in [`plugin_binary`] since the last
    /// [`check_budget`].
    pub(crate) static BUILD_TIME: std::cell::Cell<Duration> = const { std::cell::Cell::new(Duration::ZERO) };
}

/// Adds the time since its start to [`BUILD_TIME`] when dropped.
pub(crate) struct BuildTimer(pub(crate) Instant);

impl Drop for BuildTimer {
    fn drop(&mut self) {
        let spent = self.0.elapsed();
        BUILD_TIME.with(|t| t.set(t.get() + spent));
    }
}
