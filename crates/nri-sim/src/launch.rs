//! Plugins the embedded runtime launches itself (`launch: true`, and the
//! plugins of `--plugin-dir`): a private plugin directory with one wrapper
//! script per plugin (its executable, arguments and environment, its output
//! sent to a file the simulator reads) and its `NN-name.conf`, as
//! containerd finds pre-installed plugins and their configuration.
//! WebAssembly plugins (`.wasm` in `--plugin-dir`, or given with
//! `--plugin`) are copied there as they are: the runtime loads them itself,
//! and their output goes to the runtime's log.

use std::io::{Read, Seek, SeekFrom};
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
    /// `exe` is a WebAssembly module: copied, not wrapped in a script.
    pub(crate) wasm: bool,
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

/// The plugins of a user's plugin directory (`--plugin-dir`): the `NN-name`
/// executables the runtime would launch, with their configuration from the
/// same directory. A directory that does not exist, is not a directory or
/// holds no plugins is an error: the run would test nothing.
pub(crate) fn from_dir(dir: &Path) -> Result<Vec<Launched>, Error> {
    let meta = std::fs::metadata(dir)
        .map_err(|e| Error::io(format!("reading the plugin directory {}", dir.display()), e))?;
    if !meta.is_dir() {
        return Err(Error::PluginDirNotADirectory {
            dir: dir.to_owned(),
        });
    }
    let found =
        nri_runtime::launch::discover(dir, dir).map_err(|source| Error::Runtime { source })?;
    if found.is_empty() {
        return Err(Error::PluginDirEmpty {
            dir: dir.to_owned(),
        });
    }
    Ok(found
        .into_iter()
        .map(|d| Launched {
            id: d.id.to_string(),
            exe: resolve(&d.path),
            args: Vec::new(),
            env: Vec::new(),
            config: (!d.config.is_empty()).then_some(d.config),
            wasm: d.wasm,
        })
        .collect())
}

/// Writes the plugin directory `dir` (created): `NN-name` wrapper scripts
/// (or the copied WebAssembly module) and `NN-name.conf` files. Each plugin's output (stdout and stderr) goes
/// to `logs/NN-name.log` (see [`Logs`]).
pub(crate) fn write_dir(dir: &Path, logs: &Path, plugins: &[Launched]) -> Result<(), Error> {
    let io = |what: &str, p: &Path, e| Error::io(format!("{what} {}", p.display()), e);
    std::fs::create_dir_all(dir).map_err(|e| io("creating", dir, e))?;
    std::fs::create_dir_all(logs).map_err(|e| io("creating", logs, e))?;
    for p in plugins {
        let path = dir.join(&p.id);
        if p.wasm {
            std::fs::copy(&p.exe, &path).map_err(|e| io("copying", &p.exe, e))?;
        } else {
            std::fs::write(&path, script(p, logs)).map_err(|e| io("writing", &path, e))?;
        }
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| io("making executable", &path, e))?;
        if let Some(c) = &p.config {
            let conf = dir.join(format!("{}.conf", p.id));
            std::fs::write(&conf, c).map_err(|e| io("writing", &conf, e))?;
        }
    }
    Ok(())
}

/// The wrapper script of a launched plugin.
fn script(p: &Launched, logs: &Path) -> String {
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
    let log = logs.join(format!("{}.log", p.id));
    script.push_str(&format!(" >>{} 2>&1\n", quote(&log.display().to_string())));
    script
}

/// The output files of launched plugins, read as they grow.
#[derive(Debug, Default)]
pub(crate) struct Logs {
    /// Plugin id, its file, bytes already read.
    files: Vec<(String, PathBuf, u64)>,
}

impl Logs {
    /// The files [`write_dir`] set up for `plugins` in `logs`.
    pub(crate) fn new(logs: &Path, plugins: &[Launched]) -> Logs {
        Logs {
            files: plugins
                .iter()
                .map(|p| (p.id.clone(), logs.join(format!("{}.log", p.id)), 0))
                .collect(),
        }
    }

    /// Complete lines written since the last call, as (plugin id, line);
    /// with `all`, a last line without its newline too.
    pub(crate) fn poll(&mut self, all: bool) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (id, path, read) in &mut self.files {
            let mut new = Vec::new();
            let Ok(mut f) = std::fs::File::open(&*path) else {
                continue;
            };
            if f.seek(SeekFrom::Start(*read)).is_err() || f.read_to_end(&mut new).is_err() {
                continue;
            }
            let end = if all {
                new.len()
            } else {
                new.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1)
            };
            for line in String::from_utf8_lossy(&new[..end]).lines() {
                out.push((id.clone(), line.to_owned()));
            }
            *read += end as u64;
        }
        out
    }

    /// The last `n` lines plugin `id` wrote.
    pub(crate) fn tail(&self, id: &str, n: usize) -> Vec<String> {
        let Some((_, path, _)) = self.files.iter().find(|f| f.0 == id) else {
            return Vec::new();
        };
        let text = std::fs::read(path).unwrap_or_default();
        let text = String::from_utf8_lossy(&text);
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(n)..]
            .iter()
            .map(|l| (*l).to_owned())
            .collect()
    }
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
            wasm: false,
        };
        let logs = dir.path().join("logs");
        write_dir(dir.path(), &logs, std::slice::from_ref(&p)).unwrap();
        let mut log = Logs::new(&logs, &[p]);
        let out = std::process::Command::new(dir.path().join("10-echo"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            log.poll(false),
            [("10-echo".to_owned(), "it's x:a b it's".to_owned())]
        );
        assert!(log.poll(true).is_empty(), "each line is read once");
        assert_eq!(log.tail("10-echo", 8), ["it's x:a b it's"]);
        assert_eq!(
            std::fs::read_to_string(dir.path().join("10-echo.conf")).unwrap(),
            "key: value\n"
        );
    }

    #[test]
    fn a_partial_line_waits_for_its_end_unless_all_is_asked() {
        let dir = tempfile::tempdir().unwrap();
        let p = Launched {
            id: "10-x".into(),
            exe: PathBuf::from("/bin/true"),
            args: Vec::new(),
            env: Vec::new(),
            config: None,
            wasm: false,
        };
        let mut log = Logs::new(dir.path(), &[p]);
        assert!(log.poll(true).is_empty(), "no file yet");
        std::fs::write(dir.path().join("10-x.log"), "one\ntw").unwrap();
        assert_eq!(log.poll(false), [("10-x".to_owned(), "one".to_owned())]);
        assert!(log.poll(false).is_empty());
        assert_eq!(log.poll(true), [("10-x".to_owned(), "tw".to_owned())]);
    }

    #[test]
    fn a_plugin_directory_must_exist_and_hold_plugins() {
        let dir = tempfile::tempdir().unwrap();
        let e = from_dir(&dir.path().join("nope")).unwrap_err();
        assert!(
            e.to_string().starts_with("reading the plugin directory"),
            "{e}"
        );
        let e = from_dir(dir.path()).unwrap_err();
        assert!(e.to_string().contains("no plugins in it"), "{e}");
        let exe = dir.path().join("10-mine");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::fs::write(dir.path().join("10-mine.conf"), "a: 1\n").unwrap();
        let e = from_dir(&exe).unwrap_err();
        assert!(e.to_string().contains("not a directory"), "{e}");
        let found = from_dir(dir.path()).unwrap();
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].id, "10-mine");
        assert_eq!(found[0].config.as_deref(), Some("a: 1\n"));
    }
}
