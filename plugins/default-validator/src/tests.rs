#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use super::*;
use nri_plugin::api::{
    Container, ContainerAdjustment, FieldOwners, Hook, Hooks, LinuxContainer, LinuxNamespace,
    LinuxSeccomp, OwningPlugins, PluginInstance, PodSandbox, SecurityProfile,
    security_profile::ProfileType,
};

fn plugin(index: &str, name: &str) -> PluginInstance {
    PluginInstance {
        name: name.into(),
        index: index.into(),
    }
}

fn request(
    adjust: ContainerAdjustment,
    annotations: &[(&str, &str)],
) -> ValidateContainerAdjustmentRequest {
    ValidateContainerAdjustmentRequest {
        pod: Some(PodSandbox {
            id: "p".into(),
            name: "pod".into(),
            annotations: annotations
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect(),
            ..Default::default()
        }),
        container: Some(Container {
            id: "c".into(),
            name: "ctr".into(),
            ..Default::default()
        }),
        adjust: Some(adjust),
        plugins: vec![plugin("10", "logger"), plugin("20", "hooks")],
        ..Default::default()
    }
}

fn hook_adjustment() -> ContainerAdjustment {
    let mut a = ContainerAdjustment::default();
    a.add_hooks(Hooks {
        prestart: vec![Hook {
            path: "/bin/true".into(),
            ..Default::default()
        }],
        ..Default::default()
    });
    a
}

fn with_owner(
    mut req: ValidateContainerAdjustmentRequest,
    field: Field,
    owner: &str,
) -> ValidateContainerAdjustmentRequest {
    let mut simple = BTreeMap::new();
    simple.insert(field as i32, owner.to_owned());
    let mut owners = BTreeMap::new();
    owners.insert(
        "c".to_owned(),
        FieldOwners {
            simple,
            ..Default::default()
        },
    );
    req.owners = Some(OwningPlugins { owners });
    req
}

use nri_plugin::api::Field;

#[test]
fn off_unless_enabled_as_upstream() {
    for text in [
        "",
        "  \n",
        "{}",
        "null",
        "rejectOCIHookAdjustment: true",
        "enable: false",
    ] {
        let v = parse_config(text, false).unwrap();
        assert!(!v.is_enabled(), "{text:?}");
        assert!(v.validate(&request(hook_adjustment(), &[])).is_ok());
    }
    let v = parse_config("enable: true\nrejectOCIHookAdjustment: true", false).unwrap();
    assert!(v.is_enabled());
    assert!(v.validate(&request(hook_adjustment(), &[])).is_err());
}

#[test]
fn upstream_keys_exactly() {
    let yaml = "\
rejectOCIHookAdjustment: true
rejectRuntimeDefaultSeccompAdjustment: true
rejectUnconfinedSeccompAdjustment: true
rejectCustomSeccompAdjustment: true
rejectNamespaceAdjustment: true
rejectSysctlAdjustment: true
requiredPlugins: [logger, 20-hooks]
tolerateMissingPluginsAnnotation: tolerate.example.com
";
    let c = parse_config(&format!("enable: true\n{yaml}"), false)
        .unwrap()
        .config()
        .clone();
    assert!(c.enable);
    assert!(c.reject_oci_hook_adjustment && c.reject_runtime_default_seccomp_adjustment);
    assert!(c.reject_unconfined_seccomp_adjustment && c.reject_custom_seccomp_adjustment);
    assert!(c.reject_namespace_adjustment && c.reject_sysctl_adjustment);
    assert_eq!(c.required_plugins, ["logger", "20-hooks"]);
    assert_eq!(
        c.tolerate_missing_plugins_annotation,
        "tolerate.example.com"
    );

    // `strict` as a key, over the flag, for the rest of the same text.
    let typo = "enable: true\nrequiredplugins: [x]\n";
    assert!(parse_config(typo, false).is_ok());
    let e = parse_config(&format!("strict: true\n{typo}"), false).unwrap_err();
    assert!(matches!(e, Error::Strict { .. }), "{e}");
    assert!(parse_config(&format!("strict: false\n{typo}"), true).is_ok());
    assert!(parse_config("strict: true\nenable: true\n", false).is_ok());

    // Upstream's YAML names are matched exactly: the TOML spellings and
    // other cases are unknown keys, ignored (refused when strict).
    for other in [
        "enable: true\nreject_oci_hook_adjustment: true\nrequired_plugins: [x]\n",
        "ENABLE: true\nRejectOciHookAdjustment: true\n",
    ] {
        let c = parse_config(other, false).unwrap().config().clone();
        assert!(
            !c.reject_oci_hook_adjustment && c.required_plugins.is_empty(),
            "{other}"
        );
        let e = parse_config(other, true).unwrap_err();
        assert!(matches!(e, Error::Strict { .. }), "{other}: {e}");
    }
    assert!(!parse_config("ENABLE: true", false).unwrap().is_enabled());
    // JSON works too, and unknown keys are ignored.
    let c = parse_config(
        r#"{"enable": true, "rejectSysctlAdjustment": true, "colour": "red"}"#,
        false,
    )
    .unwrap()
    .config()
    .clone();
    assert!(c.reject_sysctl_adjustment && c.enable);
}

#[test]
fn enable_false_accepts_everything() {
    let v = parse_config("enable: false\nrejectOCIHookAdjustment: true\n", false).unwrap();
    assert!(!v.is_enabled());
    assert!(v.validate(&request(hook_adjustment(), &[])).is_ok());
}

#[test]
fn bad_configs_are_clear_errors() {
    for (text, want) in [
        (
            "rejectOCIHookAdjustment: [",
            "invalid default validator configuration",
        ),
        (
            "rejectOCIHookAdjustment: maybe",
            "invalid default validator configuration",
        ),
        (
            "requiredPlugins: 5",
            "invalid default validator configuration",
        ),
        ("- a list", "invalid default validator configuration"),
        ("rejectFields: [NoSuchField]", "NoSuchField"),
    ] {
        let e = parse_config(text, false).unwrap_err();
        let mut msg = e.to_string();
        let mut src = std::error::Error::source(&e);
        while let Some(s) = src {
            msg.push_str(&format!(": {s}"));
            src = s.source();
        }
        assert!(msg.contains(want), "{text:?}: {msg}");
    }
    assert!(DefaultValidatorPlugin::new(Some("enable: true\nenable: [".into()), false).is_err());
}

#[test]
fn rejects_hooks_and_names_the_plugin() {
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectOCIHookAdjustment: true".into()),
        false,
    )
    .unwrap();
    let req = with_owner(request(hook_adjustment(), &[]), Field::OciHooks, "20-hooks");
    let reason = p.check(&req).unwrap_err();
    assert!(
        reason.contains("20-hooks") && reason.contains("OCI hook"),
        "{reason}"
    );
    assert!(
        p.check(&request(ContainerAdjustment::default(), &[]))
            .is_ok()
    );
}

#[test]
fn seccomp_by_profile_kind() {
    let mut a = ContainerAdjustment::default();
    a.set_linux_seccomp_policy(LinuxSeccomp {
        default_action: "SCMP_ACT_ALLOW".into(),
        ..Default::default()
    });
    let with_profile = |t: ProfileType| {
        let mut r = request(a.clone(), &[]);
        r.container.as_mut().unwrap().linux = Some(LinuxContainer {
            seccomp_profile: Some(SecurityProfile {
                profile_type: t as i32,
                ..Default::default()
            }),
            ..Default::default()
        });
        r
    };
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectRuntimeDefaultSeccompAdjustment: true".into()),
        false,
    )
    .unwrap();
    assert!(
        p.check(&with_profile(ProfileType::RuntimeDefault))
            .unwrap_err()
            .contains("runtime default")
    );
    assert!(p.check(&with_profile(ProfileType::Localhost)).is_ok());
    assert!(p.check(&with_profile(ProfileType::Unconfined)).is_ok());
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectCustomSeccompAdjustment: true".into()),
        false,
    )
    .unwrap();
    assert!(
        p.check(&with_profile(ProfileType::Localhost))
            .unwrap_err()
            .contains("custom")
    );
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectUnconfinedSeccompAdjustment: true".into()),
        false,
    )
    .unwrap();
    assert!(p.check(&with_profile(ProfileType::Unconfined)).is_err());
    assert!(
        p.check(&request(a.clone(), &[])).is_err(),
        "no profile counts as unconfined"
    );
}

#[test]
fn namespaces_and_sysctl() {
    let mut a = ContainerAdjustment::default();
    a.add_or_replace_namespace(LinuxNamespace {
        r#type: "network".into(),
        path: "/proc/1/ns/net".into(),
    });
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectNamespaceAdjustment: true".into()),
        false,
    )
    .unwrap();
    assert!(p.check(&request(a, &[])).unwrap_err().contains("namespace"));
    let mut a = ContainerAdjustment::default();
    a.set_linux_sysctl("net.ipv4.ip_forward", "1");
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectSysctlAdjustment: true".into()),
        false,
    )
    .unwrap();
    assert!(
        p.check(&request(a.clone(), &[]))
            .unwrap_err()
            .contains("sysctl")
    );
    let p = DefaultValidatorPlugin::new(None, false).unwrap();
    assert!(p.check(&request(a, &[])).is_ok());
}

#[test]
fn required_plugins_annotation_and_toleration() {
    let p = DefaultValidatorPlugin::new(Some(
        "enable: true\nrequiredPlugins: [logger]\ntolerateMissingPluginsAnnotation: tolerate.example.com\n"
            .into(),
    ), false)
    .unwrap();
    let ok = ContainerAdjustment::default();
    assert!(
        p.check(&request(ok.clone(), &[])).is_ok(),
        "logger took part"
    );
    // The pod asks for one more, by NN-name, scoped to this container.
    let r = request(
        ok.clone(),
        &[(
            "required-plugins.noderesource.dev/container.ctr",
            "[30-policy]",
        )],
    );
    let reason = p.check(&r).unwrap_err();
    assert!(
        reason.contains("30-policy") && reason.contains("not present"),
        "{reason}"
    );
    // Tolerated by the configured annotation ...
    let r = request(
        ok.clone(),
        &[
            ("required-plugins.noderesource.dev", "- policy"),
            ("tolerate.example.com/pod", "true"),
        ],
    );
    assert!(p.check(&r).is_ok());
    // ... but a non-boolean toleration or a bad list rejects (fail closed).
    let r = request(ok.clone(), &[("tolerate.example.com", "perhaps")]);
    assert!(p.check(&r).unwrap_err().contains("not a boolean"));
    let r = request(ok, &[("required-plugins.noderesource.dev", "{a: b}")]);
    assert!(
        p.check(&r)
            .unwrap_err()
            .contains("invalid required-plugins")
    );
}

#[tokio::test(flavor = "current_thread")]
async fn handler_rejects_with_reason() {
    let p = DefaultValidatorPlugin::new(
        Some("enable: true\nrejectOCIHookAdjustment: true".into()),
        false,
    )
    .unwrap();
    let e = p
        .validate_container_adjustment(request(hook_adjustment(), &[]))
        .await
        .unwrap_err();
    assert!(e.message().contains("OCI hook"), "{e}");
    p.validate_container_adjustment(request(ContainerAdjustment::default(), &[]))
        .await
        .unwrap();
}
