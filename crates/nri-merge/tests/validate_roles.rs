//! The default validator's per-role overrides: a plugin is judged by the
//! rules of its role (from its grant, handed over as `Participants`), a
//! plugin without a role and a change no plugin is recorded for by the
//! global rules; splitting a change between a trusted and an untrusted
//! plugin does not get the untrusted one's part past it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use std::collections::BTreeMap;

use merge_util::*;
use nri_api::api::{ContainerUpdate, Hook, Hooks};
use nri_merge::validate::{
    DefaultValidator, DefaultValidatorConfig, DefaultValidatorRole, UpdateValidation, Validator,
    build_request,
};
use nri_merge::{Participant, Participants, PluginIdentity};

fn hooks() -> Hooks {
    Hooks {
        prestart: vec![Hook {
            path: "/bin/h".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

/// Hooks and sysctls rejected globally; role `trusted` may do both,
/// role `strict` may not touch mounts either.
fn validator() -> DefaultValidator {
    let mut c = DefaultValidatorConfig::default();
    c.enable = true;
    c.reject_oci_hook_adjustment = true;
    c.reject_sysctl_adjustment = true;
    let mut trusted = DefaultValidatorRole::default();
    trusted.reject_oci_hook_adjustment = Some(false);
    trusted.reject_sysctl_adjustment = Some(false);
    let mut strict = DefaultValidatorRole::default();
    strict.reject_fields = Some(vec!["Mounts".into()]);
    c.roles = BTreeMap::from([("trusted".into(), trusted), ("strict".into(), strict)]);
    DefaultValidator::new(c).unwrap()
}

fn participant(role: Option<&str>) -> Participant {
    Participant::new(
        PluginIdentity::process(0, 0, Some(1)),
        role.map(str::to_owned),
    )
}

#[test]
fn a_role_relaxes_a_rule_for_its_plugins_only() {
    let v = validator();
    let trusted = participant(Some("trusted"));
    let nobody = participant(None);
    let list = [("10-a", &trusted), ("20-b", &nobody)];
    let people = Participants::new(&list);

    let mut r = result();
    apply(&mut r, "10-a", adj(|a| _ = a.add_hooks(hooks()))).unwrap();
    let req = build_request(&r);
    assert!(v.validate_with(&req, people).is_ok(), "trusted may inject");
    // Without knowing who 10-a is, the global rule applies.
    let rej = v.validate(&req).unwrap_err();
    assert_eq!(rej.plugins, ["10-a"]);
    // Through the trait too.
    let dynv: &dyn Validator = &v;
    assert!(dynv.validate_with(&req, people).is_ok());

    // 20-b (no role) adds hooks as well: it alone is blamed.
    apply(&mut r, "20-b", adj(|a| _ = a.add_hooks(hooks()))).unwrap();
    let rej = v.validate_with(&build_request(&r), people).unwrap_err();
    assert_eq!(rej.plugins, ["20-b"], "{}", rej.reason);
    assert!(rej.reason.contains("OCI hook"), "{}", rej.reason);
}

#[test]
fn a_role_the_configuration_does_not_know_gets_the_global_rules() {
    let v = validator();
    let odd = participant(Some("no-such-role"));
    let list = [("10-a", &odd)];
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.linux_mut()
                .sysctl
                .insert("net.core.somaxconn".into(), "1024".into());
        }),
    )
    .unwrap();
    let rej = v
        .validate_with(&build_request(&r), Participants::new(&list))
        .unwrap_err();
    assert!(rej.reason.contains("sysctl"), "{}", rej.reason);
}

#[test]
fn a_role_can_tighten_the_rules() {
    let v = validator();
    let strict = participant(Some("strict"));
    let nobody = participant(None);
    let list = [("10-a", &strict), ("20-b", &nobody)];
    let people = Participants::new(&list);
    let mut r = result();
    apply(
        &mut r,
        "20-b",
        adj(|a| _ = a.add_mount(mount("/b", "/host/b"))),
    )
    .unwrap();
    assert!(v.validate_with(&build_request(&r), people).is_ok());
    apply(
        &mut r,
        "10-a",
        adj(|a| _ = a.add_mount(mount("/a", "/host/a"))),
    )
    .unwrap();
    let rej = v.validate_with(&build_request(&r), people).unwrap_err();
    assert_eq!(rej.plugins, ["10-a"]);
    assert!(rej.reason.contains("Mounts"), "{}", rej.reason);
}

#[test]
fn role_rules_apply_to_updates_by_their_sender() {
    let v = validator();
    let strict = participant(Some("strict"));
    let list = [("10-a", &strict)];
    let mut u = ContainerUpdate::new("other");
    u.set_linux_memory_limit(1 << 20);
    let updates = [u];
    let base = UpdateValidation::new("UpdateContainers", &updates).with_plugin("10-a");
    // Mounts are not in updates: accepted whoever sends them.
    assert!(v.validate_updates(&base).is_ok());
    let mut c = DefaultValidatorConfig::default();
    c.enable = true;
    let mut role = DefaultValidatorRole::default();
    role.reject_fields = Some(vec!["MemLimit".into()]);
    c.roles = BTreeMap::from([("strict".into(), role)]);
    let v = DefaultValidator::new(c).unwrap();
    assert!(v.validate_updates(&base).is_ok(), "sender's role unknown");
    let rej = v
        .validate_updates(&base.with_participants(Participants::new(&list)))
        .unwrap_err();
    assert_eq!(rej.plugins, ["10-a"]);
    assert!(rej.reason.contains("MemLimit"), "{}", rej.reason);
}

#[test]
fn roles_read_from_yaml_and_unknown_role_fields_are_refused() {
    let yaml = r#"
enable: true
rejectOCIHookAdjustment: true
roles:
  trusted:
    rejectOCIHookAdjustment: false
    rejectFields: [Env]
"#;
    let c: DefaultValidatorConfig = serde_saphyr::from_str(yaml).unwrap();
    let t = &c.roles["trusted"];
    assert_eq!(t.reject_oci_hook_adjustment, Some(false));
    assert_eq!(t.reject_sysctl_adjustment, None);
    assert_eq!(t.reject_fields.as_deref(), Some(&["Env".to_owned()][..]));
    assert!(DefaultValidator::new(c.clone()).is_ok());
    let mut bad = c;
    bad.roles.get_mut("trusted").unwrap().reject_fields = Some(vec!["Nope".into()]);
    let e = DefaultValidator::new(bad).unwrap_err().to_string();
    assert!(
        e.contains("roles.trusted.rejectFields") && e.contains("Nope"),
        "{e}"
    );
}
