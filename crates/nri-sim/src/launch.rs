//! Plugins the embedded runtime launches itself (`launch: true`): a private
//! plugin directory with one wrapper script per plugin (its executable,
//! arguments and environment) and its `NN-name.conf`, as containerd finds
//! pre-installed plugins and their configuration.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::Error;

/// A plugin to launch.
#[derive(Debug, Clone)]
pub(crate) struct Launched {
    /// `NN-name`.
    pub(crate) id: String,
    /// The executable (resolved to an absolute path when possible).
    pub(crate) exe: PathBuf,
    /// Arguments.
    pub(crate) args: Vec<String>,
    /// Extra environment.
    pub(crate) env: Vec<(String, String)>,
    /// Configuration text.
    pub(crate) config: Option<String>,
}

/// `s` quoted for a POSIX shell.
fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `exe` as an absolute path: relative paths from the current directory,
/// bare names looked up in `PATH` (the runtime gives launched plugins a
/// fixed `PATH` of its own).
pub(crate) fn resolve(exe: &Path) -> PathBuf {
    if exe.components().count() > 1 || exe.is_absolute() {
        return std::path::absolute(exe).unwrap_or_else(|_| exe.to_owned());
    }
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(exe))
        .find(|c| c.is_file())
        .unwrap_or_else(|| exe.to_owned())
}

/// Writes the plugin directory `dir` (created): `NN-name` wrapper scripts
/// and `NN-name.conf` files.
pub(crate) fn write_dir(dir: &Path, plugins: &[Launched]) -> Result<(), Error> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    for p in plugins {
        let mut script = String::from("#!/bin/sh\n");
        for (k, v) in &p.env {
            script.push_str(&format!("export {k}={}\n", quote(v)));
        }
        script.push_str("exec ");
        script.push_str(&quote(&p.exe.display().to_string()));
        for a in &p.args {
            script.push(' ');
            script.push_str(&quote(a));
        }
        script.push('\n');
        let path = dir.join(&p.id);
        std::fs::write(&path, script).map_err(|e| io("writing", &path, e))?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io("making executable", &path, e))?;
        if let Some(c) = &p.config {
            let conf = dir.join(format!("{}.conf", p.id));
            std::fs::write(&conf, c).map_err(|e| io("writing", &conf, e))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn wrapper_runs_the_executable_with_its_arguments_and_env() {
        let dir = tempfile::tempdir().unwrap();
        let p = Launched {
            id: "10-echo".into(),
            exe: PathBuf::from("/bin/sh"),
            args: vec![
                "-c".into(),
                "echo \"$X:$1\" \"it's\"".into(),
                "arg0".into(),
                "a b".into(),
            ],
            env: vec![("X".into(), "it's x".into())],
            config: Some("key: value\n".into()),
        };
        write_dir(dir.path(), &[p]).unwrap();
        let out = std::process::Command::new(dir.path().join("10-echo"))
            .output()
            .unwrap();
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "it's x:a b it's\n",
            "{out:?}"
        );
        assert_eq!(
            std::fs::read_to_string(dir.path().join("10-echo.conf")).unwrap(),
            "key: value\n"
        );
    }
}
