//! The default validator judges the merged result and its owners: hooks,
//! seccomp, namespaces, sysctls, rejected fields; splitting changes across
//! plugins does not get past it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod merge_util;

use merge_util::*;
use nri_api::api::{
    Hook, Hooks, LinuxSeccomp, SecurityProfile, ValidateContainerAdjustmentRequest,
    security_profile::ProfileType,
};
use nri_merge::CreateResult;
use nri_merge::validate::{DefaultValidator, DefaultValidatorConfig, Validator, build_request};

fn validator(f: impl FnOnce(&mut DefaultValidatorConfig)) -> DefaultValidator {
    let mut c = DefaultValidatorConfig::default();
    c.enable = true;
    f(&mut c);
    DefaultValidator::new(c).unwrap()
}

fn hooks() -> Hooks {
    Hooks {
        prestart: vec![Hook {
            path: "/bin/h".into(),
            ..Default::default()
        }],
        ..Default::default()
    }
}

fn req(r: &CreateResult) -> ValidateContainerAdjustmentRequest {
    build_request(r)
}

#[test]
fn disabled_validator_accepts_everything() {
    let v = DefaultValidator::new(DefaultValidatorConfig::default()).unwrap();
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_hooks(hooks());
        }),
    )
    .unwrap();
    assert!(!v.is_enabled());
    assert!(v.validate(&req(&r)).is_ok());
}

#[test]
fn oci_hooks_are_rejected_naming_every_injector() {
    let v = validator(|c| c.reject_oci_hook_adjustment = true);
    let mut r = result();
    assert!(v.validate(&req(&r)).is_ok());
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_hooks(hooks());
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.add_hooks(hooks());
        }),
    )
    .unwrap();
    let rej = v.validate(&req(&r)).unwrap_err();
    assert_eq!(rej.plugins, ["10-a", "20-b"]);
    assert!(rej.reason.contains("OCI hook"), "{}", rej.reason);
    // Through the trait object too, and as the crate error.
    let dynv: &dyn Validator = &v;
    let e = dynv.validate(&req(&r)).unwrap_err().into_error(v.id());
    assert!(e.to_string().contains("00-default-validator"));
}

#[test]
fn seccomp_rules_depend_on_the_containers_profile() {
    let adjusted = |profile: Option<ProfileType>| {
        let mut c = ctr();
        c.linux.as_mut().unwrap().seccomp_profile = profile.map(|p| SecurityProfile {
            profile_type: p as i32,
            ..Default::default()
        });
        let mut r = CreateResult::new(pod(), c);
        apply(
            &mut r,
            "10-a",
            adj(|a| {
                a.set_linux_seccomp_policy(LinuxSeccomp::default());
            }),
        )
        .unwrap();
        req(&r)
    };
    let rd = validator(|c| c.reject_runtime_default_seccomp_adjustment = true);
    let un = validator(|c| c.reject_unconfined_seccomp_adjustment = true);
    let cu = validator(|c| c.reject_custom_seccomp_adjustment = true);

    assert!(
        rd.validate(&adjusted(Some(ProfileType::RuntimeDefault)))
            .is_err()
    );
    assert!(
        rd.validate(&adjusted(Some(ProfileType::Unconfined)))
            .is_ok()
    );
    assert!(
        un.validate(&adjusted(None)).is_err(),
        "no profile counts as unconfined"
    );
    assert!(
        un.validate(&adjusted(Some(ProfileType::Unconfined)))
            .is_err()
    );
    assert!(un.validate(&adjusted(Some(ProfileType::Localhost))).is_ok());
    assert!(
        cu.validate(&adjusted(Some(ProfileType::Localhost)))
            .is_err()
    );
    assert!(
        cu.validate(&adjusted(Some(ProfileType::RuntimeDefault)))
            .is_ok()
    );
}

#[test]
fn namespace_changes_including_pure_removals_are_rejected() {
    let v = validator(|c| c.reject_namespace_adjustment = true);
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_namespace("network");
        }),
    )
    .unwrap();
    let rej = v.validate(&req(&r)).unwrap_err();
    assert_eq!(rej.plugins, ["10-a"]);
    assert!(rej.reason.contains("network"), "{}", rej.reason);
}

#[test]
fn sysctl_pure_removal_is_rejected() {
    // Upstream's check looks up owners by the keys of the merged sysctl map,
    // which misses a pure removal; ours sees it.
    let v = validator(|c| c.reject_sysctl_adjustment = true);
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_linux_sysctl("net.old");
        }),
    )
    .unwrap();
    assert_eq!(v.validate(&req(&r)).unwrap_err().plugins, ["10-a"]);
}

#[test]
fn splitting_across_plugins_does_not_bypass() {
    let v = validator(|c| {
        c.reject_namespace_adjustment = true;
        c.reject_fields = vec!["Devices".into(), "cpushares".into()];
    });
    // Each plugin does a harmless-looking part; the merge is what counts.
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_env("A", "1");
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_device("/dev/old");
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "30-c",
        adj(|a| {
            a.add_device(device("/dev/new", 1));
        }),
    )
    .unwrap();
    let rej = v.validate(&req(&r)).unwrap_err();
    assert!(rej.reason.contains("Devices"), "{}", rej.reason);
    assert_eq!(rej.plugins, ["20-b", "30-c"]);

    // Remove + re-add of a namespace by two cooperating plugins.
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.remove_namespace("network");
        }),
    )
    .unwrap();
    apply(
        &mut r,
        "20-b",
        adj(|a| {
            a.remove_namespace("network")
                .add_or_replace_namespace(ns("network", "/x"));
        }),
    )
    .unwrap_err(); // cannot take over another plugin's namespace at all
    assert!(v.validate(&req(&r)).is_err());
}

#[test]
fn content_without_owners_is_still_rejected() {
    // A request from a runtime that recorded no owners at all.
    let v = validator(|c| c.reject_oci_hook_adjustment = true);
    let mut r = result();
    apply(
        &mut r,
        "10-a",
        adj(|a| {
            a.add_hooks(hooks());
        }),
    )
    .unwrap();
    let mut q = req(&r);
    q.owners = None;
    let rej = v.validate(&q).unwrap_err();
    assert!(rej.plugins.is_empty());
    assert!(rej.reason.contains("unrecorded"), "{}", rej.reason);
}

#[test]
fn unknown_reject_field_is_a_config_error() {
    let mut c = DefaultValidatorConfig::default();
    c.reject_fields = vec!["NoSuchField".into()];
    assert!(matches!(
        DefaultValidator::new(c),
        Err(nri_merge::Error::InvalidConfig { .. })
    ));
}
