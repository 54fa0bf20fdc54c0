//! OCI hook configuration files (`hooks.d/*.json`, the format of
//! containers/common `pkg/hooks`, used by CRI-O and podman), their
//! matching rules, and the hooks they give a container.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nri_plugin::api::{Hook, Hooks, OptionalInt};
use regex::Regex;
use serde::Deserialize;
use serde_json::Value;

/// Default hooks directory (packaged hooks).
pub const DEFAULT_DIR: &str = "/usr/share/containers/oci/hooks.d";
/// Override directory (administrator hooks; a file here replaces a
/// same-named file of [`DEFAULT_DIR`]).
pub const OVERRIDE_DIR: &str = "/etc/containers/oci/hooks.d";
/// The current configuration format.
pub const VERSION: &str = "1.0.0";
/// The legacy configuration format (also assumed without `version`).
pub const OLD_VERSION: &str = "0.1.0";

/// Why a hook file or a match failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HookError {
    /// A hook file cannot be read.
    #[error("reading hook {}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A hook file is invalid.
    #[error("parsing hook {}: {reason}", path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A hook with a `when.commands` condition met a container without
    /// arguments.
    #[error("matching hook {name:?}: process.args must have at least one entry")]
    NoArgs {
        /// The hook's file name.
        name: String,
    },
}

/// When a hook applies.
#[derive(Debug, Clone, Default)]
pub struct When {
    /// `when.always`.
    pub always: Option<bool>,
    /// `when.annotations`: (key pattern, value pattern).
    pub annotations: Vec<(Regex, Regex)>,
    /// `when.commands`: patterns for `args[0]`.
    pub commands: Vec<Regex>,
    /// `when.hasBindMounts`.
    pub has_bind_mounts: Option<bool>,
    /// Any condition suffices (legacy 0.1.0 files); else all must hold.
    pub or: bool,
}

/// What a container offers to the conditions.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    /// The process arguments.
    pub args: &'a [String],
    /// Container annotations overlaid with the pod's.
    pub annotations: &'a BTreeMap<String, String>,
    /// Whether the container has any mount.
    pub has_bind_mounts: bool,
}

impl When {
    /// Evaluates the conditions as containers/common does: with `or`
    /// unset every present condition must hold and at least one must be
    /// present; `always: false` and `hasBindMounts: false` never match; the
    /// `commands` condition, checked last, decides alone when present
    /// (a match of `args[0]` by any pattern). Patterns are unanchored.
    ///
    /// Returns `Err(())` when `commands` is set and there are no args.
    #[allow(clippy::result_unit_err)]
    pub fn matches(&self, t: Target<'_>) -> Result<bool, ()> {
        let mut matches = 0;
        if let Some(always) = self.always {
            if always {
                if self.or {
                    return Ok(true);
                }
                matches += 1;
            } else if !self.or {
                return Ok(false);
            }
        }
        if let Some(want) = self.has_bind_mounts {
            if want && t.has_bind_mounts {
                if self.or {
                    return Ok(true);
                }
                matches += 1;
            } else if !self.or {
                return Ok(false);
            }
        }
        for (kp, vp) in &self.annotations {
            let hit = t
                .annotations
                .iter()
                .any(|(k, v)| kp.is_match(k) && vp.is_match(v));
            if hit {
                if self.or {
                    return Ok(true);
                }
                matches += 1;
            } else if !self.or {
                return Ok(false);
            }
        }
        if !self.commands.is_empty() {
            let Some(cmd) = t.args.first() else {
                return Err(());
            };
            return Ok(self.commands.iter().any(|p| p.is_match(cmd)));
        }
        Ok(matches > 0)
    }
}

/// The OCI lifecycle stages a hook may run in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `prestart` (deprecated in OCI; injected as `createRuntime`, as
    /// containers/common does) and `createRuntime`.
    CreateRuntime,
    /// `createContainer`.
    CreateContainer,
    /// `startContainer`.
    StartContainer,
    /// `poststart`.
    Poststart,
    /// `poststop`.
    Poststop,
}

impl Stage {
    fn parse(s: &str) -> Option<Stage> {
        Some(match s {
            "prestart" | "createRuntime" => Stage::CreateRuntime,
            "createContainer" => Stage::CreateContainer,
            "startContainer" => Stage::StartContainer,
            "poststart" => Stage::Poststart,
            "poststop" => Stage::Poststop,
            _ => return None,
        })
    }
}

/// One valid hook configuration.
#[derive(Debug, Clone)]
pub struct HookConfig {
    /// The hook to inject.
    pub hook: Hook,
    /// When.
    pub when: When,
    /// Where.
    pub stages: Vec<Stage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawHook {
    path: String,
    args: Vec<String>,
    env: Vec<String>,
    timeout: Option<i64>,
}

#[derive(Deserialize, Default)]
#[serde(default, rename_all = "camelCase")]
struct RawWhen {
    always: Option<bool>,
    annotations: BTreeMap<String, String>,
    commands: Vec<String>,
    has_bind_mounts: Option<bool>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawV1 {
    hook: RawHook,
    when: RawWhen,
    stages: Option<Vec<String>>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct RawV0 {
    hook: Option<String>,
    arguments: Option<Vec<String>>,
    stages: Option<Vec<String>>,
    stage: Option<Vec<String>>,
    cmds: Option<Vec<String>>,
    cmd: Option<Vec<String>>,
    annotations: Option<Vec<String>>,
    annotation: Option<Vec<String>>,
    hasbindmounts: Option<bool>,
}

/// Renames keys of one JSON object that equal a field name ignoring case
/// (Go's `encoding/json`), without descending (map keys are data).
fn fold(v: &mut Value, fields: &[&str]) {
    if let Value::Object(map) = v {
        let old = std::mem::take(map);
        for (k, val) in old {
            match fields.iter().find(|f| f.eq_ignore_ascii_case(&k)) {
                Some(f) if **f != k => {
                    if !map.contains_key(*f) {
                        map.insert((*f).to_owned(), val);
                    }
                }
                _ => {
                    map.insert(k, val);
                }
            }
        }
    }
}

fn regex(what: &str, p: &str) -> Result<Regex, String> {
    Regex::new(p).map_err(|e| format!("invalid {what} {p:?}: {e}"))
}

/// Parses and validates one hook file's content. `exists` tells whether
/// the hook's executable exists (injected for tests).
///
/// # Errors
///
/// A text naming the problem.
#[allow(clippy::too_many_lines)]
pub fn parse_hook(content: &[u8], exists: impl Fn(&Path) -> bool) -> Result<HookConfig, String> {
    let mut v: Value = serde_json::from_slice(content).map_err(|e| e.to_string())?;
    fold(&mut v, &["version", "hook", "when", "stages"]);
    let version = match v.get("version") {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(other) => return Err(format!("version check: version is not a string: {other}")),
    };
    let cfg = match version.as_str() {
        VERSION => {
            if let Some(h) = v.get_mut("hook") {
                fold(h, &["path", "args", "env", "timeout"]);
            }
            if let Some(w) = v.get_mut("when") {
                fold(w, &["always", "annotations", "commands", "hasBindMounts"]);
            }
            let raw: RawV1 = serde_json::from_value(v).map_err(|e| format!("{VERSION}: {e}"))?;
            let mut annotations = Vec::new();
            for (k, val) in &raw.when.annotations {
                annotations.push((regex("annotation key", k)?, regex("annotation value", val)?));
            }
            let commands = raw
                .when
                .commands
                .iter()
                .map(|c| regex("command", c))
                .collect::<Result<_, _>>()?;
            let stages = raw
                .stages
                .ok_or_else(|| "missing required property: stages".to_owned())?;
            HookConfig {
                hook: Hook {
                    path: raw.hook.path,
                    args: raw.hook.args,
                    env: raw.hook.env,
                    timeout: raw.hook.timeout.map(|value| OptionalInt { value }),
                },
                when: When {
                    always: raw.when.always,
                    annotations,
                    commands,
                    has_bind_mounts: raw.when.has_bind_mounts,
                    or: false,
                },
                stages: parse_stages(&stages)?,
            }
        }
        OLD_VERSION | "" => {
            fold(
                &mut v,
                &[
                    "hook",
                    "arguments",
                    "stages",
                    "stage",
                    "cmds",
                    "cmd",
                    "annotations",
                    "annotation",
                    "hasbindmounts",
                ],
            );
            let raw: RawV0 =
                serde_json::from_value(v).map_err(|e| format!("{OLD_VERSION}: {e}"))?;
            let path = raw
                .hook
                .ok_or_else(|| format!("{OLD_VERSION}: missing required property: hook"))?;
            let stages = either(raw.stages, raw.stage, "stage")?
                .ok_or_else(|| format!("{OLD_VERSION}: missing required property: stages"))?;
            let cmds = either(raw.cmds, raw.cmd, "cmd")?.unwrap_or_default();
            let annotations = either(raw.annotations, raw.annotation, "annotation")?;
            let args = match raw.arguments {
                Some(a) => std::iter::once(path.clone()).chain(a).collect(),
                None => Vec::new(),
            };
            HookConfig {
                hook: Hook {
                    path,
                    args,
                    ..Default::default()
                },
                when: When {
                    always: None,
                    annotations: match annotations {
                        Some(list) => vec![(
                            regex("annotation key", ".*")?,
                            regex("annotation value", &list.join("|"))?,
                        )],
                        None => Vec::new(),
                    },
                    commands: cmds
                        .iter()
                        .map(|c| regex("command", c))
                        .collect::<Result<_, _>>()?,
                    has_bind_mounts: raw.hasbindmounts,
                    or: true,
                },
                stages: parse_stages(&stages)?,
            }
        }
        other => return Err(format!("unrecognized hook version: {other:?}")),
    };
    if cfg.hook.path.is_empty() {
        return Err("missing required property: hook.path".to_owned());
    }
    if !exists(Path::new(&cfg.hook.path)) {
        return Err(format!(
            "hook executable {:?} does not exist",
            cfg.hook.path
        ));
    }
    Ok(cfg)
}

fn either(
    a: Option<Vec<String>>,
    b: Option<Vec<String>>,
    name: &str,
) -> Result<Option<Vec<String>>, String> {
    match (a, b) {
        (Some(_), Some(_)) => Err(format!("cannot set both '{name}' and '{name}s'")),
        (a, b) => Ok(a.or(b)),
    }
}

fn parse_stages(stages: &[String]) -> Result<Vec<Stage>, String> {
    stages
        .iter()
        .map(|s| Stage::parse(s).ok_or_else(|| format!("unknown stage {s:?}")))
        .collect()
}

/// What identifies the state of the hook directories (file names, sizes,
/// modification times): unchanged means no reload.
pub type Fingerprint = Vec<(PathBuf, u64, Option<SystemTime>)>;

/// Lists the `*.json` files of `dirs` with their fingerprint. Missing or
/// unreadable directories count as empty (logged at debug level).
pub fn fingerprint(dirs: &[PathBuf]) -> Fingerprint {
    let mut fp = Vec::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                tracing::debug!("hooks directory {}: {e}", dir.display());
                continue;
            }
        };
        let mut files: Vec<_> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .map(|p| {
                let md = std::fs::metadata(&p).ok();
                let len = md.as_ref().map_or(0, std::fs::Metadata::len);
                let mtime = md.and_then(|m| m.modified().ok());
                (p, len, mtime)
            })
            .collect();
        files.sort();
        fp.extend(files);
    }
    fp
}

/// The valid hooks of `dirs`, keyed by file name (a later directory's file
/// replaces an earlier one's of the same name), in matching order
/// (file names compared in lower case). Invalid files are reported in the
/// second list and skipped; a file that vanished meanwhile is skipped
/// silently.
pub fn load(dirs: &[PathBuf]) -> (Vec<(String, HookConfig)>, Vec<HookError>) {
    let mut by_name: BTreeMap<String, HookConfig> = BTreeMap::new();
    let mut errors = Vec::new();
    for (path, _, _) in fingerprint(dirs) {
        let Some(name) = path.file_name().map(|n| n.to_string_lossy().into_owned()) else {
            continue;
        };
        let content = match std::fs::read(&path) {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => {
                errors.push(HookError::Read { path, source });
                continue;
            }
        };
        match parse_hook(&content, |p| std::fs::symlink_metadata(p).is_ok()) {
            Ok(h) => {
                by_name.insert(name, h);
            }
            Err(reason) => {
                // As containers/common: a broken file does not replace an
                // earlier directory's valid file of the same name.
                errors.push(HookError::Invalid { path, reason });
            }
        }
    }
    let mut hooks: Vec<(String, HookConfig)> = by_name.into_iter().collect();
    hooks.sort_by_key(|(n, _)| n.to_lowercase());
    (hooks, errors)
}

/// The hooks of `hooks` that match `target`, stage by stage, in order.
///
/// # Errors
///
/// [`HookError::NoArgs`].
pub fn select(
    hooks: &[(String, HookConfig)],
    target: Target<'_>,
) -> Result<Option<Hooks>, HookError> {
    let mut out: Option<Hooks> = None;
    for (name, h) in hooks {
        let hit = h
            .when
            .matches(target)
            .map_err(|()| HookError::NoArgs { name: name.clone() })?;
        if !hit {
            tracing::debug!("hook {name} did not match");
            continue;
        }
        tracing::debug!("hook {name} matched; adding to stages {:?}", h.stages);
        let o = out.get_or_insert_with(Hooks::default);
        for s in &h.stages {
            let list = match s {
                Stage::CreateRuntime => &mut o.create_runtime,
                Stage::CreateContainer => &mut o.create_container,
                Stage::StartContainer => &mut o.start_container,
                Stage::Poststart => &mut o.poststart,
                Stage::Poststop => &mut o.poststop,
            };
            list.push(h.hook.clone());
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(json: &str) -> Result<HookConfig, String> {
        parse_hook(json.as_bytes(), |_| true)
    }

    fn target<'a>(
        args: &'a [String],
        ann: &'a BTreeMap<String, String>,
        mounts: bool,
    ) -> Target<'a> {
        Target {
            args,
            annotations: ann,
            has_bind_mounts: mounts,
        }
    }

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| (*s).to_owned()).collect()
    }

    const ALWAYS: &str = r#"{"version": "1.0.0",
        "hook": {"path": "/usr/local/sbin/demo-hook.sh", "args": ["demo-hook.sh", "always"], "env": ["A=1"], "timeout": 5},
        "when": {"always": true}, "stages": ["prestart", "poststop"]}"#;

    #[test]
    fn parse_v1() {
        let h = parse(ALWAYS).unwrap();
        assert_eq!(h.hook.path, "/usr/local/sbin/demo-hook.sh");
        assert_eq!(h.hook.args, ["demo-hook.sh", "always"]);
        assert_eq!(h.hook.env, ["A=1"]);
        assert_eq!(h.hook.timeout, Some(OptionalInt { value: 5 }));
        assert_eq!(h.stages, [Stage::CreateRuntime, Stage::Poststop]);
        assert_eq!(h.when.always, Some(true));
        // Go decodes keys case-insensitively.
        let h = parse(r#"{"Version": "1.0.0", "HOOK": {"Path": "/x"}, "When": {"HasBindMounts": true}, "Stages": []}"#).unwrap();
        assert_eq!(h.hook.path, "/x");
        assert_eq!(h.when.has_bind_mounts, Some(true));
        assert!(h.stages.is_empty());
    }

    #[test]
    fn parse_errors() {
        let cases = [
            (r#"{"version": "2.0.0"}"#, "unrecognized hook version"),
            (
                r#"{"version": "1.0.0", "hook": {}, "stages": []}"#,
                "hook.path",
            ),
            (
                r#"{"version": "1.0.0", "hook": {"path": "/x"}}"#,
                "missing required property: stages",
            ),
            (
                r#"{"version": "1.0.0", "hook": {"path": "/x"}, "stages": ["later"]}"#,
                "unknown stage \"later\"",
            ),
            (
                r#"{"version": "1.0.0", "hook": {"path": "/x"}, "when": {"commands": ["("]}, "stages": []}"#,
                "invalid command",
            ),
            (
                r#"{"version": "1.0.0", "hook": {"path": "/x"}, "when": {"annotations": {"a": "[" }}, "stages": []}"#,
                "invalid annotation value",
            ),
            (
                r#"{"version": "1.0.0", "hook": {"path": "/x", "args": "a"}, "stages": []}"#,
                "1.0.0: invalid type",
            ),
            (r#"{"version": 1}"#, "version check"),
            ("{", "EOF"),
            (
                r#"{"hook": "/x", "stage": ["poststop"], "stages": ["poststop"]}"#,
                "cannot set both",
            ),
            (
                r#"{"stages": ["poststop"]}"#,
                "missing required property: hook",
            ),
        ];
        for (json, want) in cases {
            let e = parse(json).err().unwrap_or_else(|| panic!("{json} parsed"));
            assert!(e.contains(want), "{json}: {e}");
        }
        let e = parse_hook(ALWAYS.as_bytes(), |_| false).err().unwrap();
        assert!(e.contains("does not exist"), "{e}");
    }

    #[test]
    fn parse_v0() {
        let h = parse(r#"{"hook": "/bin/h", "arguments": ["x"], "stage": ["prestart"], "cmds": ["^sh$"], "annotation": ["foo", "bar"]}"#).unwrap();
        assert_eq!(h.hook.args, ["/bin/h", "x"]);
        assert!(h.when.or);
        let ann = BTreeMap::from([("k".to_owned(), "xbarx".to_owned())]);
        // Any condition suffices: the annotation value matches.
        assert!(
            h.when
                .matches(target(&args(&["bash"]), &ann, false))
                .unwrap()
        );
        let none = BTreeMap::new();
        assert!(
            h.when
                .matches(target(&args(&["sh"]), &none, false))
                .unwrap()
        );
        assert!(
            !h.when
                .matches(target(&args(&["bash"]), &none, false))
                .unwrap()
        );
    }

    #[test]
    fn matching_rules() {
        let none = BTreeMap::new();
        let ann = BTreeMap::from([("io.example/trace".to_owned(), "enabled".to_owned())]);
        let busybox = args(&["/bin/busybox", "sh"]);
        let w = |j: &str| {
            parse(&format!(
                r#"{{"version": "1.0.0", "hook": {{"path": "/h"}}, "when": {j}, "stages": []}}"#
            ))
            .unwrap()
            .when
        };
        // No condition: never.
        assert!(!w("{}").matches(target(&busybox, &ann, true)).unwrap());
        assert!(
            w(r#"{"always": true}"#)
                .matches(target(&busybox, &none, false))
                .unwrap()
        );
        assert!(
            !w(r#"{"always": false}"#)
                .matches(target(&busybox, &none, false))
                .unwrap()
        );
        assert!(
            w(r#"{"hasBindMounts": true}"#)
                .matches(target(&busybox, &none, true))
                .unwrap()
        );
        assert!(
            !w(r#"{"hasBindMounts": true}"#)
                .matches(target(&busybox, &none, false))
                .unwrap()
        );
        assert!(
            !w(r#"{"hasBindMounts": false}"#)
                .matches(target(&busybox, &none, false))
                .unwrap()
        );
        // Unanchored patterns, key and value on the same annotation.
        let a = w(r#"{"annotations": {"trace$": "^enab"}}"#);
        assert!(a.matches(target(&busybox, &ann, false)).unwrap());
        assert!(!a.matches(target(&busybox, &none, false)).unwrap());
        let a = w(r#"{"annotations": {"trace": "disabled"}}"#);
        assert!(!a.matches(target(&busybox, &ann, false)).unwrap());
        // All conditions must hold.
        let a = w(r#"{"always": true, "annotations": {"trace": "enabled"}}"#);
        assert!(a.matches(target(&busybox, &ann, false)).unwrap());
        assert!(!a.matches(target(&busybox, &none, false)).unwrap());
        // commands: args[0] against each pattern.
        let c = w(r#"{"commands": ["busybox"]}"#);
        assert!(c.matches(target(&busybox, &none, false)).unwrap());
        assert!(
            !c.matches(target(&args(&["sh", "busybox"]), &none, false))
                .unwrap()
        );
        assert!(c.matches(target(&[], &none, false)).is_err());
        let c = w(r#"{"always": true, "commands": ["^/bin/"]}"#);
        assert!(c.matches(target(&busybox, &none, false)).unwrap());
        let c = w(r#"{"always": false, "commands": ["busybox"]}"#);
        assert!(!c.matches(target(&busybox, &none, false)).unwrap());
    }

    fn write(dir: &Path, name: &str, body: &str) {
        std::fs::write(dir.join(name), body).unwrap();
    }

    #[test]
    fn load_and_select() {
        let tmp = tempfile::tempdir().unwrap();
        let exe = tmp.path().join("hook.sh");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        std::fs::create_dir_all(&a).unwrap();
        std::fs::create_dir_all(&b).unwrap();
        let hook = |tag: &str, when: &str, stages: &str| {
            format!(
                r#"{{"version": "1.0.0", "hook": {{"path": "{}", "args": ["{tag}"]}}, "when": {when}, "stages": {stages}}}"#,
                exe.display()
            )
        };
        write(
            &a,
            "B-second.json",
            &hook("second", r#"{"always": true}"#, r#"["poststart"]"#),
        );
        write(
            &a,
            "a-first.json",
            &hook(
                "first",
                r#"{"always": true}"#,
                r#"["prestart", "createContainer"]"#,
            ),
        );
        write(
            &a,
            "c-replaced.json",
            &hook("default-dir", r#"{"always": true}"#, r#"["poststop"]"#),
        );
        write(
            &b,
            "c-replaced.json",
            &hook(
                "override-dir",
                r#"{"commands": ["busybox"]}"#,
                r#"["poststop", "startContainer", "createRuntime"]"#,
            ),
        );
        write(&b, "d-broken.json", "{");
        write(
            &b,
            "e-missing-exe.json",
            r#"{"version": "1.0.0", "hook": {"path": "/no/such/hook"}, "when": {"always": true}, "stages": []}"#,
        );
        write(&b, "not-a-hook.txt", "{");
        let dirs = vec![a, b, tmp.path().join("absent")];
        let (hooks, errors) = load(&dirs);
        let names: Vec<_> = hooks.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["a-first.json", "B-second.json", "c-replaced.json"]);
        assert_eq!(errors.len(), 2, "{errors:?}");

        let none = BTreeMap::new();
        let h = select(&hooks, target(&args(&["busybox"]), &none, false))
            .unwrap()
            .unwrap();
        let tags = |l: &[Hook]| l.iter().map(|h| h.args[0].clone()).collect::<Vec<_>>();
        assert_eq!(tags(&h.create_runtime), ["first", "override-dir"]);
        assert_eq!(tags(&h.create_container), ["first"]);
        assert_eq!(tags(&h.poststart), ["second"]);
        assert_eq!(tags(&h.start_container), ["override-dir"]);
        assert_eq!(tags(&h.poststop), ["override-dir"]);
        assert!(h.prestart.is_empty());
        let h = select(&hooks, target(&args(&["sh"]), &none, false))
            .unwrap()
            .unwrap();
        assert!(h.poststop.is_empty());
        // commands with empty args: an error naming the hook.
        let e = select(&hooks, target(&[], &none, false)).unwrap_err();
        assert!(e.to_string().contains("c-replaced.json"), "{e}");
        // Nothing at all.
        assert!(
            select(&[], target(&busybox_args(), &none, false))
                .unwrap()
                .is_none()
        );

        // The fingerprint changes when a file is added.
        let before = fingerprint(&dirs);
        write(&dirs[0], "f.json", "{}");
        assert_ne!(before, fingerprint(&dirs));
    }

    fn busybox_args() -> Vec<String> {
        args(&["busybox"])
    }
}
