//! The default validator's configuration reads upstream's YAML keys and
//! TOML-style keys.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_merge::validate::DefaultValidatorConfig;

#[test]
fn upstream_yaml_keys() {
    let yaml = r#"
enable: true
rejectOCIHookAdjustment: true
rejectRuntimeDefaultSeccompAdjustment: true
rejectUnconfinedSeccompAdjustment: true
rejectCustomSeccompAdjustment: true
rejectNamespaceAdjustment: true
rejectSysctlAdjustment: true
requiredPlugins: [a, 10-b]
tolerateMissingPluginsAnnotation: tolerate-missing-nri-plugins.noderesource.dev
rejectFields: [Mounts, Devices]
someFutureKey: 1
"#;
    let c: DefaultValidatorConfig = serde_saphyr::from_str(yaml).unwrap();
    assert!(
        c.enable && c.reject_oci_hook_adjustment && c.reject_runtime_default_seccomp_adjustment
    );
    assert!(c.reject_unconfined_seccomp_adjustment && c.reject_custom_seccomp_adjustment);
    assert!(c.reject_namespace_adjustment && c.reject_sysctl_adjustment);
    assert_eq!(c.required_plugins, ["a", "10-b"]);
    assert_eq!(
        c.tolerate_missing_plugins_annotation,
        "tolerate-missing-nri-plugins.noderesource.dev"
    );
    assert_eq!(c.reject_fields, ["Mounts", "Devices"]);
}

#[test]
fn toml_style_keys_and_defaults() {
    let c: DefaultValidatorConfig = serde_json::from_str(
        r#"{"enable": true, "reject_oci_hook_adjustment": true, "required_plugins": ["x"],
            "tolerate_missing_plugins_annotation": "t", "reject_fields": ["Env"]}"#,
    )
    .unwrap();
    assert!(c.enable && c.reject_oci_hook_adjustment);
    assert!(!c.reject_namespace_adjustment);
    assert_eq!(c.required_plugins, ["x"]);
    assert_eq!(c.reject_fields, ["Env"]);
    let empty: DefaultValidatorConfig = serde_json::from_str("{}").unwrap();
    assert_eq!(empty, DefaultValidatorConfig::default());
}
