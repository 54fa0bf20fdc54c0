//! Checks of the sample plugins' deployment files under `deploy/`: each
//! plugin's kustomize base (`kustomization.yaml`, `daemonset.yaml`, other
//! resources), the image list `images.yaml`, the shared `Containerfile`,
//! and their consistency with each other and with the plugin crates.
//!
//! Every check returns the list of problems found (empty = fine), so a test
//! can show them all at once, and can be run on a modified copy to prove it
//! catches a mistake.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// The sample plugins that must have a deployment.
pub const PLUGINS: &[&str] = &[
    "logger",
    "template",
    "device-injector",
    "hook-injector",
    "ulimit-adjuster",
    "network-device-injector",
    "differ",
    "v010-adapter",
    "default-validator",
];

/// The proxy (`tools/nri-proxy`), deployed beside the sample plugins: its
/// base is `deploy/nri-proxy`, its DaemonSet `nri-proxy`.
pub const PROXY: &str = "nri-proxy";

/// Where every plugin's NRI socket directory comes from.
pub const NRI_SOCKET_DIR: &str = "/var/run/nri";

/// The proxy's own socket directory on the host (the one host path
/// mounted read-write: the proxy creates its socket there).
pub const PROXY_SOCKET_DIR: &str = "/var/run/nri-proxy";

/// Every deployment of `deploy/`: the sample plugins and the proxy.
pub fn deployments() -> Vec<&'static str> {
    let mut v = PLUGINS.to_vec();
    v.push(PROXY);
    v
}

/// The host paths of `plugin` that must be mounted read-write (all others
/// read-only).
pub fn writable_host_paths(plugin: &str) -> BTreeSet<&'static str> {
    if plugin == PROXY {
        BTreeSet::from([PROXY_SOCKET_DIR])
    } else {
        BTreeSet::new()
    }
}

/// The host paths a plugin may mount (all read-only): the NRI socket
/// directory, plus what the plugin itself reads.
pub fn expected_host_paths(plugin: &str) -> BTreeSet<&'static str> {
    let mut s = BTreeSet::from([NRI_SOCKET_DIR]);
    match plugin {
        "hook-injector" => {
            s.insert("/usr/share/containers/oci/hooks.d");
            s.insert("/etc/containers/oci/hooks.d");
        }
        "v010-adapter" => {
            s.insert("/opt/nri/bin");
            s.insert("/etc/nri");
        }
        PROXY => {
            s.insert(PROXY_SOCKET_DIR);
        }
        _ => {}
    }
    s
}

/// One image of `images.yaml`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDef {
    /// Plugin (directory under `deploy/` and `plugins/`).
    pub plugin: String,
    /// Cargo package.
    pub package: String,
    /// Binary of the package.
    pub binary: String,
    /// Image name (without tag).
    pub image: String,
}

/// Parses a YAML file into JSON-like data.
///
/// # Errors
///
/// The file cannot be read or parsed (message names the file).
pub fn load_yaml(path: &Path) -> Result<Value, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    serde_saphyr::from_str::<Value>(&text).map_err(|e| format!("{}: {e}", path.display()))
}

fn s<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    get(v, path).and_then(Value::as_str)
}

fn get<'a>(v: &'a Value, path: &[&str]) -> Option<&'a Value> {
    path.iter().try_fold(v, |v, k| v.get(*k))
}

/// Reads `images.yaml`: the version (image tag) and the images.
///
/// # Errors
///
/// Unreadable, or an entry lacks a field.
pub fn load_images(deploy: &Path) -> Result<(String, Vec<ImageDef>), String> {
    let v = load_yaml(&deploy.join("images.yaml"))?;
    let version = s(&v, &["version"])
        .ok_or("images.yaml: no version")?
        .to_owned();
    let list = get(&v, &["images"])
        .and_then(Value::as_array)
        .ok_or("images.yaml: no images list")?;
    let mut out = Vec::new();
    for (i, e) in list.iter().enumerate() {
        let f = |k: &str| {
            s(e, &[k])
                .map(str::to_owned)
                .ok_or_else(|| format!("images.yaml: entry {i} has no {k}"))
        };
        out.push(ImageDef {
            plugin: f("plugin")?,
            package: f("package")?,
            binary: f("binary")?,
            image: f("image")?,
        });
    }
    Ok((version, out))
}

/// Checks the list of images: exactly [`deployments`], one entry each,
/// unique image names, each a kustomize base directory.
pub fn check_image_list(deploy: &Path, images: &[ImageDef]) -> Vec<String> {
    let mut problems = Vec::new();
    let listed: BTreeSet<&str> = images.iter().map(|i| i.plugin.as_str()).collect();
    let wanted: BTreeSet<&str> = deployments().into_iter().collect();
    if listed != wanted || listed.len() != images.len() {
        problems.push(format!(
            "images.yaml lists {listed:?}, expected each of {wanted:?} once"
        ));
    }
    let names: BTreeSet<&str> = images.iter().map(|i| i.image.as_str()).collect();
    if names.len() != images.len() {
        problems.push("images.yaml: image names are not unique".into());
    }
    // Every directory with a kustomization is listed.
    if let Ok(dir) = std::fs::read_dir(deploy) {
        for e in dir.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if e.path().join("kustomization.yaml").exists() && !listed.contains(name.as_str()) {
                problems.push(format!(
                    "deploy/{name} has a kustomization but no image in images.yaml"
                ));
            }
        }
    }
    problems
}

/// Checks the shared `Containerfile`: a builder stage building a static
/// binary of `PACKAGE`/`BINARY` with the min-size profile, copied into a
/// scratch (or chosen) base.
pub fn check_containerfile(text: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.starts_with('#'))
        .collect();
    let froms: Vec<&str> = lines
        .iter()
        .copied()
        .filter(|l| l.starts_with("FROM "))
        .collect();
    if !lines.contains(&"ARG BASE=scratch") {
        problems.push(
            "Containerfile: the final base must default to scratch (ARG BASE=scratch)".into(),
        );
    }
    match froms.as_slice() {
        [build, last] => {
            if !build.ends_with(" AS build") {
                problems.push(format!(
                    "Containerfile: first stage {build:?} is not the builder stage `AS build`"
                ));
            }
            if *last != "FROM ${BASE}" {
                problems.push(format!(
                    "Containerfile: final stage {last:?} is not `FROM ${{BASE}}`"
                ));
            }
        }
        other => problems.push(format!(
            "Containerfile: expected two stages, found {}",
            other.len()
        )),
    }
    for need in ["ARG PACKAGE", "ARG BINARY"] {
        if !lines.contains(&need) {
            problems.push(format!("Containerfile: missing {need:?}"));
        }
    }
    let code = lines.join("\n");
    if !code.contains("target-feature=+crt-static") && !code.contains("-unknown-linux-musl") {
        problems.push("Containerfile: the binary is not built static (musl or +crt-static)".into());
    }
    if !text.contains("--profile min-size") {
        problems.push("Containerfile: not built with the min-size profile".into());
    }
    if !text.contains("-p \"$PACKAGE\" --bin \"$BINARY\"") {
        problems.push("Containerfile: does not build -p $PACKAGE --bin $BINARY".into());
    }
    if !text.contains("COPY --from=build") || !text.contains("ENTRYPOINT") {
        problems.push("Containerfile: the final stage must copy the binary from the builder and set ENTRYPOINT".into());
    }
    problems
}

/// Checks the workspace's `Cargo.toml` (`text`): the `min-size` profile,
/// which the images build with, must unwind on panic. The SDK's promises
/// (a handler panic answered with `INTERNAL` while the plugin serves on, a
/// panicking teardown method answered with success) need unwinding; with
/// `panic = "abort"` any handler panic ends the plugin.
pub fn check_profile(text: &str) -> Vec<String> {
    let Some(section) = text.split("[profile.min-size]").nth(1) else {
        return vec!["Cargo.toml: no [profile.min-size] (the images build with it)".into()];
    };
    let body = section.split("\n[").next().unwrap_or_default();
    let aborts = body.lines().any(|l| {
        let l = l.split('#').next().unwrap_or_default();
        l.split_once('=')
            .is_some_and(|(k, v)| k.trim() == "panic" && v.trim().trim_matches('"') == "abort")
    });
    if aborts {
        return vec![
            "Cargo.toml: [profile.min-size] sets panic = \"abort\": a handler panic would end the plugin (the SDK's panic containment needs unwinding)".into(),
        ];
    }
    Vec::new()
}

/// Checks that `plugins/<plugin>/Cargo.toml` (the proxy:
/// `tools/nri-proxy/Cargo.toml`) is package `package` with a binary
/// `binary`.
pub fn check_crate(repo: &Path, def: &ImageDef) -> Vec<String> {
    let dir = if def.plugin == PROXY {
        "tools"
    } else {
        "plugins"
    };
    let path = repo.join(dir).join(&def.plugin).join("Cargo.toml");
    let Ok(text) = std::fs::read_to_string(&path) else {
        return vec![format!("{}: missing", path.display())];
    };
    let mut problems = Vec::new();
    let mut section = String::new();
    let mut package = None;
    let mut bins = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.starts_with('[') {
            section = line.to_owned();
            continue;
        }
        if let Some(v) = line
            .strip_prefix("name")
            .map(str::trim_start)
            .and_then(|r| r.strip_prefix('='))
        {
            let v = v.trim().trim_matches('"').to_owned();
            match section.as_str() {
                "[package]" => package = Some(v),
                "[[bin]]" => bins.push(v),
                _ => {}
            }
        }
    }
    if package.as_deref() != Some(def.package.as_str()) {
        problems.push(format!(
            "{}: package is {package:?}, images.yaml says {:?}",
            path.display(),
            def.package
        ));
    }
    let has_bin = bins.contains(&def.binary)
        || (bins.is_empty() && package.as_deref() == Some(def.binary.as_str()));
    if !has_bin {
        problems.push(format!(
            "{}: no binary {:?} (binaries: {bins:?})",
            path.display(),
            def.binary
        ));
    }
    problems
}

/// Checks one plugin's kustomize base in `dir` against its image entry.
#[allow(clippy::too_many_lines)]
pub fn check_base(dir: &Path, def: &ImageDef, version: &str) -> Vec<String> {
    let mut problems = Vec::new();
    let kpath = dir.join("kustomization.yaml");
    let k = match load_yaml(&kpath) {
        Ok(k) => k,
        Err(e) => return vec![e],
    };
    let at = |m: String| format!("{}: {m}", kpath.display());
    if s(&k, &["apiVersion"]) != Some("kustomize.config.k8s.io/v1beta1") {
        problems.push(at(
            "apiVersion is not kustomize.config.k8s.io/v1beta1".into()
        ));
    }
    if s(&k, &["kind"]) != Some("Kustomization") {
        problems.push(at("kind is not Kustomization".into()));
    }
    if s(&k, &["namespace"]).is_none_or(str::is_empty) {
        problems.push(at("no namespace".into()));
    }
    let images = get(&k, &["images"])
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    match images.as_slice() {
        [img] => {
            if s(img, &["name"]) != Some(def.image.as_str())
                || s(img, &["newName"]) != Some(def.image.as_str())
            {
                problems.push(at(format!("image {img} is not {:?}", def.image)));
            }
            if s(img, &["newTag"]) != Some(version) {
                problems.push(at(format!(
                    "image tag {:?} is not {version:?}",
                    img.get("newTag")
                )));
            }
        }
        _ => problems.push(at(format!(
            "expected one image entry, found {}",
            images.len()
        ))),
    }
    let resources: Vec<String> = get(&k, &["resources"])
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let mut daemonsets = 0;
    let mut configmaps = BTreeSet::new();
    let mut docs = Vec::new();
    for r in &resources {
        match load_yaml(&dir.join(r)) {
            Ok(v) => docs.push((r.clone(), v)),
            Err(e) => problems.push(e),
        }
    }
    for (_, v) in &docs {
        if s(v, &["kind"]) == Some("ConfigMap") {
            if let Some(n) = s(v, &["metadata", "name"]) {
                configmaps.insert(n.to_owned());
            }
        }
    }
    for (r, v) in &docs {
        let file = dir.join(r).display().to_string();
        if s(v, &["apiVersion"]).is_none_or(str::is_empty) {
            problems.push(format!("{file}: no apiVersion"));
        }
        if s(v, &["metadata", "name"]).is_none_or(str::is_empty) {
            problems.push(format!("{file}: no metadata.name"));
        }
        match s(v, &["kind"]) {
            Some("DaemonSet") => {
                daemonsets += 1;
                problems.extend(
                    check_daemonset(v, def, version, &configmaps)
                        .into_iter()
                        .chain(check_rollout(v, &def.plugin))
                        .map(|p| format!("{file}: {p}")),
                );
            }
            Some("ConfigMap") => {}
            other => problems.push(format!("{file}: unexpected kind {other:?}")),
        }
    }
    if daemonsets != 1 {
        problems.push(at(format!(
            "expected one DaemonSet among the resources, found {daemonsets}"
        )));
    }
    problems
}

/// Checks a DaemonSet of plugin `def`. `configmaps`: ConfigMaps defined
/// next to it (configMap volumes must name one).
#[allow(clippy::too_many_lines)]
pub fn check_daemonset(
    ds: &Value,
    def: &ImageDef,
    version: &str,
    configmaps: &BTreeSet<String>,
) -> Vec<String> {
    let mut p = Vec::new();
    if s(ds, &["apiVersion"]) != Some("apps/v1") {
        p.push("apiVersion is not apps/v1".to_owned());
    }
    let want_name = if def.plugin == PROXY {
        PROXY.to_owned()
    } else {
        format!("nri-plugin-{}", def.plugin)
    };
    if s(ds, &["metadata", "name"]) != Some(want_name.as_str()) {
        p.push(format!("metadata.name is not {want_name:?}"));
    }
    let selector = get(ds, &["spec", "selector", "matchLabels"]).and_then(Value::as_object);
    let labels = get(ds, &["spec", "template", "metadata", "labels"]).and_then(Value::as_object);
    match (selector, labels) {
        (Some(sel), Some(lab)) if !sel.is_empty() => {
            for (k, v) in sel {
                if lab.get(k) != Some(v) {
                    p.push(format!(
                        "selector {k}={v} does not match the pod template's labels"
                    ));
                }
            }
        }
        _ => p.push("no spec.selector.matchLabels or no pod template labels".to_owned()),
    }
    let spec = get(ds, &["spec", "template", "spec"])
        .cloned()
        .unwrap_or(Value::Null);
    for host in ["hostNetwork", "hostPID", "hostIPC"] {
        if spec.get(host).and_then(Value::as_bool) == Some(true) {
            p.push(format!("{host} is set"));
        }
    }
    let volumes: BTreeMap<String, Value> = spec
        .get("volumes")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|v| Some((s(v, &["name"])?.to_owned(), v.clone())))
                .collect()
        })
        .unwrap_or_default();
    let containers = spec
        .get("containers")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    if containers.is_empty() {
        p.push("no containers".to_owned());
    }
    let want_image = format!("{}:{version}", def.image);
    let mut used = BTreeSet::new();
    let mut host_mounts: BTreeMap<String, bool> = BTreeMap::new();
    for c in &containers {
        let cname = s(c, &["name"]).unwrap_or("?");
        let cp = |m: String| format!("container {cname:?}: {m}");
        if s(c, &["image"]) != Some(want_image.as_str()) {
            p.push(cp(format!(
                "image {:?} is not {want_image:?}",
                c.get("image")
            )));
        }
        let args: Vec<&str> = c
            .get("args")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if def.plugin == PROXY {
            if !args.windows(2).any(|w| w[0] == "--config") {
                p.push(cp(format!("args {args:?} do not pass --config FILE")));
            }
        } else if !args
            .windows(2)
            .any(|w| w[0] == "-name" && w[1] == def.plugin)
        {
            p.push(cp(format!(
                "args {args:?} do not pass -name {}",
                def.plugin
            )));
        }
        for kind in ["requests", "limits"] {
            for res in ["cpu", "memory"] {
                if get(c, &["resources", kind, res]).is_none() {
                    p.push(cp(format!("no resources.{kind}.{res}")));
                }
            }
        }
        match c.get("securityContext") {
            None => p.push(cp("no securityContext".into())),
            Some(sc) => {
                if sc.get("privileged").and_then(Value::as_bool) == Some(true) {
                    p.push(cp("privileged".into()));
                }
                if sc.get("allowPrivilegeEscalation").and_then(Value::as_bool) != Some(false) {
                    p.push(cp("allowPrivilegeEscalation is not false".into()));
                }
                if sc.get("readOnlyRootFilesystem").and_then(Value::as_bool) != Some(true) {
                    p.push(cp("readOnlyRootFilesystem is not true".into()));
                }
                let drop: Vec<&str> = get(sc, &["capabilities", "drop"])
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                if !drop.contains(&"ALL") {
                    p.push(cp("capabilities.drop does not contain ALL".into()));
                }
                if get(sc, &["capabilities", "add"])
                    .and_then(Value::as_array)
                    .is_some_and(|a| !a.is_empty())
                {
                    p.push(cp("adds capabilities".into()));
                }
            }
        }
        for m in c
            .get("volumeMounts")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default()
        {
            let name = s(&m, &["name"]).unwrap_or("");
            let Some(vol) = volumes.get(name) else {
                p.push(cp(format!("volumeMount {name:?} refers to no volume")));
                continue;
            };
            used.insert(name.to_owned());
            let ro = m.get("readOnly").and_then(Value::as_bool) == Some(true);
            if let Some(path) = s(vol, &["hostPath", "path"]) {
                if s(&m, &["mountPath"]) != Some(path) {
                    p.push(cp(format!(
                        "host path {path:?} mounted at {:?}, expected the same path",
                        m.get("mountPath")
                    )));
                }
                host_mounts.insert(path.to_owned(), ro);
            }
        }
    }
    for (name, vol) in &volumes {
        if !used.contains(name) {
            p.push(format!("volume {name:?} is not mounted"));
        }
        if let Some(cm) = s(vol, &["configMap", "name"]) {
            if !configmaps.contains(cm) {
                p.push(format!(
                    "volume {name:?} names ConfigMap {cm:?}, which is not among the resources"
                ));
            }
        }
    }
    let expected = expected_host_paths(&def.plugin);
    let got: BTreeSet<&str> = host_mounts.keys().map(String::as_str).collect();
    if got != expected {
        p.push(format!("host paths {got:?}, expected {expected:?}"));
    }
    let writable = writable_host_paths(&def.plugin);
    for (path, ro) in &host_mounts {
        let rw = writable.contains(path.as_str());
        if !ro && !rw {
            p.push(format!("host path {path:?} is not mounted read-only"));
        }
        if *ro && rw {
            p.push(format!(
                "host path {path:?} is mounted read-only, but the socket is created there"
            ));
        }
    }
    p
}

/// The plugins whose DaemonSet rolls with a surge (`maxSurge: 1,
/// maxUnavailable: 0`, and `minReadySeconds`): on each node the new pod
/// starts while the old one still runs. That holds where two instances
/// answering the same event at once do no harm, which on a stock runtime
/// (containerd/nri has no hand-over: both instances get every event, and
/// two answers changing the same field under one plugin name conflict)
/// means plugins that change nothing: observers and validators. The
/// others roll `maxUnavailable: 1`; behind `nri-proxy` (which hands over
/// from the old instance to the new, docs/runtime/upgrades.md) every
/// plugin may surge. The proxy itself does not: a second proxy is a
/// second plugin for the runtime, without the plugins behind the first.
pub const SURGING: &[&str] = &["logger", "template", "differ", "default-validator"];

/// Checks the DaemonSet's update strategy (see [`SURGING`]).
pub fn check_rollout(ds: &Value, plugin: &str) -> Vec<String> {
    let mut p = Vec::new();
    let strategy = get(ds, &["spec", "updateStrategy"]);
    if strategy.and_then(|v| s(v, &["type"])) != Some("RollingUpdate") {
        p.push("spec.updateStrategy.type is not RollingUpdate".to_owned());
    }
    let field = |k: &str| {
        strategy
            .and_then(|v| get(v, &["rollingUpdate", k]))
            .map(|v| v.to_string())
    };
    let (surge, unavailable) = (field("maxSurge"), field("maxUnavailable"));
    let min_ready = get(ds, &["spec", "minReadySeconds"]).and_then(Value::as_u64);
    if SURGING.contains(&plugin) {
        if surge.as_deref() != Some("1") || unavailable.as_deref() != Some("0") {
            p.push(format!(
                "rolls with maxSurge {surge:?}, maxUnavailable {unavailable:?}; expected 1 and 0 (the new pod starts before the old one stops)"
            ));
        }
        if min_ready.unwrap_or(0) == 0 {
            p.push("surges without minReadySeconds: the old pod may stop before the new one has registered".to_owned());
        }
    } else if surge.as_deref().is_some_and(|v| v != "0") || unavailable.as_deref() != Some("1") {
        p.push(format!(
            "rolls with maxSurge {surge:?}, maxUnavailable {unavailable:?}; expected maxUnavailable 1 without a surge (two instances on a stock runtime both get every event; see SURGING)"
        ));
    }
    p
}

/// Runs every check on the deployment directory `deploy` of the repository
/// `repo`.
pub fn check_all(repo: &Path, deploy: &Path) -> Vec<String> {
    let (version, images) = match load_images(deploy) {
        Ok(x) => x,
        Err(e) => return vec![e],
    };
    let mut problems = check_image_list(deploy, &images);
    match std::fs::read_to_string(repo.join("Cargo.toml")) {
        Ok(t) => problems.extend(check_profile(&t)),
        Err(e) => problems.push(format!("Cargo.toml: {e}")),
    }
    match std::fs::read_to_string(deploy.join("Containerfile")) {
        Ok(t) => problems.extend(check_containerfile(&t)),
        Err(e) => problems.push(format!("Containerfile: {e}")),
    }
    for def in &images {
        problems.extend(check_crate(repo, def));
        problems.extend(check_base(&deploy.join(&def.plugin), def, &version));
    }
    problems
}

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}
