//! The check upstream's hook-injector makes before it starts: its hook
//! manager refuses to start when a hook directory exists but cannot be
//! read, or when any `*.json` file in the directories cannot be read or
//! is not a valid hook (containerd/nri v0.12.5 `plugins/hook-injector`
//! exits with status 1 when setting up its hook manager fails). A missing
//! directory is fine. Later reloads skip a broken file instead (see
//! [`crate::hooks::load`]), in both.

use std::path::PathBuf;

use crate::hooks::{self, HookError};

/// What stops the plugin at start-up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StartupError {
    /// A hook directory exists but cannot be listed.
    #[error("reading hook directory {}", dir.display())]
    Directory {
        /// The directory.
        dir: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A hook file cannot be read or is invalid.
    #[error(transparent)]
    Hook(#[from] HookError),
}

/// Every problem that stops the plugin at start-up (empty: it may start).
///
/// As upstream, each directory is read in file name order and judged by
/// its first problem: when that is a hook whose executable does not
/// exist, upstream's manager takes the whole directory's error for a
/// missing directory and starts anyway (its hooks with problems left
/// out), so this check passes that directory too.
pub fn check(dirs: &[PathBuf]) -> Vec<StartupError> {
    let mut errors = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                errors.push(StartupError::Directory {
                    dir: dir.clone(),
                    source,
                });
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.to_string_lossy().ends_with(".json"))
            .collect();
        files.sort();
        let mut found: Vec<(bool, StartupError)> = Vec::new();
        for path in files {
            match std::fs::read(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => found.push((false, HookError::Read { path, source }.into())),
                Ok(content) => match hooks::parse_hook(&content, |_| true) {
                    Err(reason) => found.push((false, HookError::Invalid { path, reason }.into())),
                    Ok(h) if std::fs::symlink_metadata(&h.hook.path).is_err() => {
                        let reason = format!("hook executable {:?} does not exist", h.hook.path);
                        found.push((true, HookError::Invalid { path, reason }.into()));
                    }
                    Ok(_) => {}
                },
            }
        }
        if found.first().is_some_and(|(missing_exe, _)| !missing_exe) {
            errors.extend(found.into_iter().map(|(_, e)| e));
        }
    }
    errors
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn broken_files_and_unreadable_directories_stop_the_start() {
        let tmp = tempfile::tempdir().unwrap();
        let (good, bad) = (tmp.path().join("good"), tmp.path().join("bad"));
        std::fs::create_dir_all(&good).unwrap();
        std::fs::create_dir_all(&bad).unwrap();
        let exe = tmp.path().join("hook.sh");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::write(
            good.join("ok.json"),
            format!(
                r#"{{"version": "1.0.0", "hook": {{"path": "{}"}}, "when": {{"always": true}}, "stages": ["poststop"]}}"#,
                exe.display()
            ),
        )
        .unwrap();
        std::fs::write(good.join("notes.txt"), "not a hook").unwrap();
        let missing = tmp.path().join("missing");
        // Valid files, a non-JSON file and a missing directory: fine.
        assert!(check(&[good.clone(), missing.clone()]).is_empty());
        // A broken file, in any directory: named.
        std::fs::write(bad.join("broken.json"), "{").unwrap();
        let errors = check(&[good.clone(), bad.clone()]);
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("broken.json"),
            "{}",
            errors[0]
        );
        // Upstream's quirk: a directory whose first problem (by name) is a
        // missing executable passes.
        std::fs::write(
            bad.join("a-missing.json"),
            r#"{"version": "1.0.0", "hook": {"path": "/nonexistent/hook"}, "when": {"always": true}, "stages": []}"#,
        )
        .unwrap();
        assert!(check(&[good.clone(), bad.clone()]).is_empty());
        std::fs::rename(bad.join("a-missing.json"), bad.join("z-missing.json")).unwrap();
        assert_eq!(check(std::slice::from_ref(&bad)).len(), 2);
        // A path that exists but is not a directory cannot be listed.
        let file = tmp.path().join("hook.sh");
        let errors = check(&[file]);
        assert!(
            matches!(errors[..], [StartupError::Directory { .. }]),
            "{errors:?}"
        );
    }
}
