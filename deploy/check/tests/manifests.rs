//! The deployment files of the sample plugins (deploy/): every manifest
//! parses and passes the checks of this crate; the checks catch typical
//! mistakes; and, where `kubectl` is installed, every kustomize base builds.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use nri_deploy_check::*;

fn deploy() -> std::path::PathBuf {
    repo_root().join("deploy")
}

#[test]
fn deploy_files_are_consistent() {
    let problems = check_all(&repo_root(), &deploy());
    assert!(
        problems.is_empty(),
        "problems:\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn image_tag_is_the_workspace_version() {
    let (version, images) = load_images(&deploy()).unwrap();
    assert_eq!(images.len(), deployments().len());
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    let ws = cargo
        .split("[workspace.package]")
        .nth(1)
        .and_then(|s| s.lines().find(|l| l.trim_start().starts_with("version")))
        .and_then(|l| l.split('"').nth(1))
        .unwrap();
    assert_eq!(version, ws);
}

/// The images' profile unwinds on panic (the SDK's panic containment);
/// the check catches a profile that aborts.
#[test]
fn the_image_profile_unwinds() {
    let cargo = std::fs::read_to_string(repo_root().join("Cargo.toml")).unwrap();
    assert_eq!(check_profile(&cargo), Vec::<String>::new());
    let aborting = "[profile.release]\ndebug = 1\n\n[profile.min-size]\ninherits = \"release\"\npanic = \"abort\" # smaller\n\n[workspace.lints.rust]\n";
    assert_eq!(check_profile(aborting).len(), 1);
    let elsewhere = "[profile.min-size]\nopt-level = \"s\"\n\n[profile.other]\npanic = \"abort\"\n";
    assert!(check_profile(elsewhere).is_empty());
}

/// Copies the YAML files and the Containerfile of deploy/ to a temp dir.
fn copy_deploy() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    let src = deploy();
    for f in ["images.yaml", "Containerfile"] {
        std::fs::copy(src.join(f), tmp.path().join(f)).unwrap();
    }
    for p in deployments() {
        std::fs::create_dir(tmp.path().join(p)).unwrap();
        for e in std::fs::read_dir(src.join(p)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), tmp.path().join(p).join(e.file_name())).unwrap();
        }
    }
    tmp
}

fn edit(path: &Path, from: &str, to: &str) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    std::fs::write(path, text.replacen(from, to, 1)).unwrap();
}

#[test]
#[allow(clippy::too_many_lines)]
fn checks_catch_mistakes() {
    type Mutation = (&'static str, &'static str, &'static str, &'static str);
    let cases: &[Mutation] = &[
        (
            "logger/daemonset.yaml",
            "image: localhost/nri-rs/logger:",
            "image: localhost/nri-rs/loger:",
            "is not \"localhost/nri-rs/logger:",
        ),
        (
            "logger/kustomization.yaml",
            "newName: localhost/nri-rs/logger",
            "newName: other/logger",
            "is not \"localhost/nri-rs/logger\"",
        ),
        (
            "hook-injector/daemonset.yaml",
            "mountPath: /etc/containers/oci/hooks.d\n              readOnly: true",
            "mountPath: /etc/containers/oci/hooks.d",
            "not mounted read-only",
        ),
        (
            "template/daemonset.yaml",
            "privileged: false",
            "privileged: true",
            "privileged",
        ),
        (
            "differ/daemonset.yaml",
            "- name: nri-socket-dir\n              mountPath",
            "- name: nri-sock\n              mountPath",
            "refers to no volume",
        ),
        (
            "ulimit-adjuster/daemonset.yaml",
            "matchLabels:\n      app.kubernetes.io/name: nri-plugin-ulimit-adjuster",
            "matchLabels:\n      app.kubernetes.io/name: nri-plugin-other",
            "does not match",
        ),
        (
            "v010-adapter/daemonset.yaml",
            "path: /opt/nri/bin",
            "path: /opt/nri/plugins",
            "host path",
        ),
        (
            "device-injector/daemonset.yaml",
            "          securityContext:",
            "          securityContextX:",
            "no securityContext",
        ),
        (
            "network-device-injector/daemonset.yaml",
            "            limits:",
            "            limitz:",
            "no resources.limits",
        ),
        (
            "default-validator/daemonset.yaml",
            "name: nri-plugin-default-validator\n",
            "name: nri-plugin-dv\n",
            "metadata.name",
        ),
        (
            "images.yaml",
            "binary: nri-differ",
            "binary: differ",
            "no binary \"differ\"",
        ),
        (
            "Containerfile",
            "ARG BASE=scratch",
            "ARG BASE=debian",
            "scratch",
        ),
        ("Containerfile", "+crt-static", "+foo", "static"),
        (
            "nri-proxy/daemonset.yaml",
            "mountPath: /var/run/nri-proxy\n",
            "mountPath: /var/run/nri-proxy\n              readOnly: true\n",
            "mounted read-only, but the socket is created there",
        ),
        (
            "nri-proxy/daemonset.yaml",
            "mountPath: /var/run/nri\n              readOnly: true",
            "mountPath: /var/run/nri",
            "\"/var/run/nri\" is not mounted read-only",
        ),
        (
            "nri-proxy/daemonset.yaml",
            "\"--config\"",
            "\"--conf\"",
            "do not pass --config",
        ),
        (
            "nri-proxy/daemonset.yaml",
            "configMap:\n            name: nri-proxy",
            "configMap:\n            name: nri-proxy-cfg",
            "not among the resources",
        ),
        // A plugin that changes nothing surges; one that adjusts does not.
        (
            "logger/daemonset.yaml",
            "maxUnavailable: 0",
            "maxUnavailable: 1",
            "expected 1 and 0",
        ),
        (
            "logger/daemonset.yaml",
            "minReadySeconds: 5",
            "minReadySeconds: 0",
            "without minReadySeconds",
        ),
        (
            "ulimit-adjuster/daemonset.yaml",
            "maxUnavailable: 1",
            "maxSurge: 1\n      maxUnavailable: 0",
            "without a surge",
        ),
    ];
    for (file, from, to, want) in cases {
        let tmp = copy_deploy();
        assert!(
            check_all(&repo_root(), tmp.path()).is_empty(),
            "the copy is clean"
        );
        edit(&tmp.path().join(file), from, to);
        let problems = check_all(&repo_root(), tmp.path());
        assert!(
            problems.iter().any(|p| p.contains(want)),
            "{file}: {from:?} -> {to:?}: expected a problem with {want:?}, got {problems:#?}"
        );
    }
}

#[test]
fn kustomize_bases_build() {
    let Ok(out) = Command::new("kubectl")
        .arg("version")
        .arg("--client")
        .output()
    else {
        eprintln!("skipping: kubectl not installed");
        return;
    };
    if !out.status.success() {
        eprintln!("skipping: kubectl does not run");
        return;
    }
    let (version, images) = load_images(&deploy()).unwrap();
    for def in &images {
        let out = Command::new("kubectl")
            .arg("kustomize")
            .arg(deploy().join(&def.plugin))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "kubectl kustomize deploy/{}: {}",
            def.plugin,
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text).unwrap();
        let ds = docs
            .iter()
            .find(|d| d["kind"] == "DaemonSet")
            .unwrap_or_else(|| panic!("{}: no DaemonSet in {text}", def.plugin));
        assert_eq!(ds["metadata"]["namespace"], "kube-system");
        assert_eq!(
            ds["spec"]["template"]["spec"]["containers"][0]["image"],
            format!("{}:{version}", def.image)
        );
        for d in &docs {
            assert_eq!(d["metadata"]["namespace"], "kube-system", "{d}");
        }
    }
}
