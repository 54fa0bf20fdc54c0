//! NRI versions: parsing, capabilities and inference.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use nri_api::{
    Error, EventMask, NriVersion, VersionOrigin, infer_nri_version, runtime_nri_version,
};

fn v(major: u32, minor: u32, patch: u32) -> NriVersion {
    NriVersion::new(major, minor, patch)
}

#[test]
fn parse_accepts_common_forms() {
    let cases = [
        ("v0.12.2", v(0, 12, 2)),
        ("0.8.0", v(0, 8, 0)),
        ("v1.2", v(1, 2, 0)),
        ("v2", v(2, 0, 0)),
        ("v0.3.1-0.20230504231226-94185418e253", v(0, 3, 1)),
        ("v0.11.0-37-g41b9c58", v(0, 11, 0)),
        ("1.2.3+build.5", v(1, 2, 3)),
        (" v2.2.1 ", v(2, 2, 1)),
        ("v2.4.0-beta.0", v(2, 4, 0)),
    ];
    for (text, want) in cases {
        assert_eq!(NriVersion::parse(text), Ok(want), "{text}");
    }
}

#[test]
fn parse_rejects_garbage() {
    for text in [
        "",
        "v",
        "abc",
        "1.x.3",
        "1.2.3.4",
        "v1..2",
        "(devel)",
        "-1.2.3",
        "1.2.99999999999",
    ] {
        assert_eq!(
            NriVersion::parse(text),
            Err(Error::InvalidVersion {
                version: text.into()
            }),
            "{text}"
        );
    }
}

#[test]
fn display_and_current() {
    assert_eq!(v(0, 12, 2).to_string(), "v0.12.2");
    assert_eq!(NriVersion::CURRENT.to_string(), nri_api::NRI_VERSION);
    assert!(v(0, 9, 9) < v(0, 10, 0));
    assert!(v(1, 0, 0) > v(0, 99, 99));
}

#[test]
fn valid_events_by_version() {
    let cases = [
        (v(0, 2, 0), 0x7FF),
        (v(0, 8, 0), 0x7FF),
        (v(0, 9, 1), 0x7FF),
        (v(0, 10, 0), 0x3FFF),
        (v(0, 11, 0), 0x3FFF),
        (v(0, 12, 2), 0x3FFF),
        (v(1, 0, 0), 0x3FFF),
    ];
    for (ver, mask) in cases {
        assert_eq!(ver.valid_events(), EventMask::from_i32(mask), "{ver}");
        assert_eq!(nri_api::valid_events(ver), EventMask::from_i32(mask));
    }
}

#[test]
fn dedicated_rpcs_from_v0_12() {
    assert!(!v(0, 11, 9).has_dedicated_event_rpcs());
    assert!(v(0, 12, 0).has_dedicated_event_rpcs());
    assert!(v(0, 12, 2).has_dedicated_event_rpcs());
    assert!(v(1, 0, 0).has_dedicated_event_rpcs());
    assert!(!nri_api::has_dedicated_event_rpcs(v(0, 8, 0)));
}

#[test]
fn plugin_failure_policy_from_v0_12_4() {
    assert!(!v(0, 8, 0).honours_plugin_failure_policy());
    assert!(!v(0, 12, 3).honours_plugin_failure_policy());
    assert!(v(0, 12, 4).honours_plugin_failure_policy());
    assert!(v(0, 12, 5).honours_plugin_failure_policy());
    assert!(v(0, 13, 0).honours_plugin_failure_policy());
    assert!(v(1, 0, 0).honours_plugin_failure_policy());
}

#[test]
fn inference_table() {
    let cases: &[(&str, &str, Option<NriVersion>)] = &[
        ("containerd", "v1.6.30", None),
        ("containerd", "v1.7.0", Some(v(0, 3, 0))),
        ("containerd", "v1.7.13", Some(v(0, 4, 0))),
        ("containerd", "v1.7.25", Some(v(0, 6, 1))),
        ("containerd", "v1.7.26", Some(v(0, 8, 0))),
        ("containerd", "1.7.30", Some(v(0, 8, 0))),
        ("containerd", "v2.0.0", Some(v(0, 8, 0))),
        ("containerd", "v2.0.0-rc.3", Some(v(0, 8, 0))),
        ("containerd", "v2.1.5", Some(v(0, 8, 0))),
        ("containerd", "v2.1.6", Some(v(0, 8, 0))),
        ("containerd", "v2.2.0", Some(v(0, 10, 0))),
        ("containerd", "v2.2.1", Some(v(0, 11, 0))),
        ("containerd", "v2.2.3-12-gabcdef0", Some(v(0, 11, 0))),
        ("containerd", "v2.3.0", Some(v(0, 12, 0))),
        ("containerd", "v2.4.2", Some(v(0, 12, 3))),
        ("containerd", "v2.9.0", Some(v(0, 12, 3))),
        ("Containerd", "2.1.0", Some(v(0, 8, 0))),
        ("containerd", "garbage", None),
        ("cri-o", "1.25.0", None),
        ("cri-o", "1.26.0", Some(v(0, 2, 0))),
        ("cri-o", "1.28.3", Some(v(0, 3, 0))),
        ("cri-o", "1.29.1", Some(v(0, 5, 0))),
        ("cri-o", "1.30.4", Some(v(0, 6, 0))),
        ("cri-o", "1.31.0", Some(v(0, 6, 1))),
        ("cri-o", "1.32.0", Some(v(0, 9, 0))),
        ("cri-o", "1.33.2", Some(v(0, 9, 0))),
        ("cri-o", "1.34.1", Some(v(0, 10, 0))),
        ("CRI-O", "v1.35.0", Some(v(0, 11, 0))),
        ("crio", "1.35.0", Some(v(0, 11, 0))),
        ("podman", "5.0.0", None),
        ("", "", None),
    ];
    for (name, version, want) in cases {
        assert_eq!(infer_nri_version(name, version), *want, "{name} {version}");
    }
}

#[test]
fn runtime_version_prefers_reported() {
    let r = runtime_nri_version("v0.12.1", "containerd", "v2.0.0");
    assert_eq!(r.version, v(0, 12, 1));
    assert_eq!(r.origin, VersionOrigin::Reported);

    for placeholder in ["", "(devel)", "0.0.0-unknown", "not-a-version"] {
        let r = runtime_nri_version(placeholder, "containerd", "v2.2.0");
        assert_eq!(r.version, v(0, 10, 0), "{placeholder:?}");
        assert_eq!(r.origin, VersionOrigin::Inferred);
    }

    let r = runtime_nri_version("", "my-runtime", "1.0.0");
    assert_eq!(r.version, NriVersion::CONSERVATIVE);
    assert_eq!(r.origin, VersionOrigin::Assumed);
    assert_eq!(r.version.valid_events(), EventMask::ALL_BEFORE_V0_10);
    assert!(!r.version.has_dedicated_event_rpcs());
}

#[test]
fn our_runtime_tags_its_nri_version_and_only_that_tag_counts() {
    let ours = nri_api::nri_rs_runtime_version();
    assert_eq!(ours, "v0.12.5+nri-rs");
    assert!(nri_api::is_nri_rs_runtime(&ours));
    assert!(nri_api::is_nri_rs_runtime(" v0.13.0+build.7.nri-rs "));
    // What Go runtimes send (their module version, or a placeholder), and
    // look-alikes, are not ours.
    for other in [
        "v0.12.5",
        "",
        "(devel)",
        "v0.0.0-unknown",
        "v0.12.5-nri-rs",
        "v0.12.5+nri-rs2",
        "v0.12.5+xnri-rs",
        "nri-rs",
    ] {
        assert!(!nri_api::is_nri_rs_runtime(other), "{other:?}");
    }
    // Everyone else reads the tagged version as v0.12.5.
    let reported = nri_api::runtime_nri_version(&ours, "my-runtime", "v1");
    assert_eq!(reported.version, NriVersion::CURRENT);
    assert_eq!(reported.origin, nri_api::VersionOrigin::Reported);
}
