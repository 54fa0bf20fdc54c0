//! Fuzz the merge core (nri-merge): arbitrary bytes are cut into
//! length-prefixed chunks (1 tag byte, 2 length bytes little-endian, body),
//! each decoded with prost as a ContainerAdjustment, ContainerUpdate,
//! ContainerEviction or whole CreateContainerResponse and applied from one of
//! four fake plugins to the CreateContainer, UpdateContainer and StopContainer
//! collectors. Nothing may panic, and the merged adjustment must keep its
//! canonical form (never both "-k" and "k").
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_api::api::{
    Container, ContainerAdjustment, ContainerEviction, ContainerUpdate, CreateContainerResponse,
    PodSandbox,
};
use nri_merge::PluginId;
use nri_merge::{CreateResult, Ownership, StopResult, UpdateResult};
use nri_merge::validate::{DefaultValidator, DefaultValidatorConfig, build_request};
use prost::Message;

struct Chunks<'a>(&'a [u8]);

impl<'a> Iterator for Chunks<'a> {
    type Item = (u8, &'a [u8]);
    fn next(&mut self) -> Option<Self::Item> {
        let (&tag, rest) = self.0.split_first()?;
        let (len, rest) = match rest {
            [a, b, rest @ ..] => (usize::from(u16::from_le_bytes([*a, *b])), rest),
            _ => (rest.len(), &[][..]),
        };
        let len = len.min(rest.len());
        let (body, rest) = rest.split_at(len);
        self.0 = rest;
        Some((tag, body))
    }
}

fn no_marker_and_key<'a>(keys: impl Iterator<Item = &'a String> + Clone) {
    for k in keys.clone() {
        if let Some(plain) = k.strip_prefix('-') {
            if !plain.starts_with('-') {
                assert!(
                    !keys.clone().any(|x| x == plain),
                    "merged map holds both -{plain} and {plain}"
                );
            }
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let plugins: Vec<PluginId> = ["00-a", "10-b", "10-c", "90-d"]
        .iter()
        .map(|s| PluginId::parse(s).expect("constant plugin ids are valid"))
        .collect();
    let mut chunks = Chunks(data);
    let container = chunks
        .next()
        .and_then(|(_, b)| Container::decode(b).ok())
        .unwrap_or_default();
    let pod = PodSandbox::default();
    let mut create = CreateResult::new(pod.clone(), container.clone());
    let mut update = UpdateResult::new(pod, container, None);
    let mut stop = StopResult::new();

    for (tag, body) in chunks.take(64) {
        let plugin = &plugins[usize::from(tag & 3)];
        match (tag >> 2) & 3 {
            0 => {
                if let Ok(a) = ContainerAdjustment::decode(body) {
                    let _ = create.apply(plugin, Some(a), Vec::new(), Vec::new());
                }
            }
            1 => {
                if let Ok(u) = ContainerUpdate::decode(body) {
                    let _ = create.apply(plugin, None, vec![u.clone()], Vec::new());
                    let _ = update.apply(plugin, vec![u.clone()], Vec::new());
                    let _ = stop.apply(plugin, vec![u]);
                }
            }
            2 => {
                if let Ok(e) = ContainerEviction::decode(body) {
                    let _ = create.apply(plugin, None, Vec::new(), vec![e.clone()]);
                    let _ = update.apply(plugin, Vec::new(), vec![e]);
                }
            }
            _ => {
                if let Ok(r) = CreateContainerResponse::decode(body) {
                    let _ = create.apply_response(plugin, r);
                }
            }
        }
    }

    let adjust = create.adjustment();
    no_marker_and_key(adjust.annotations.keys());
    if let Some(l) = adjust.linux.as_ref() {
        no_marker_and_key(l.sysctl.keys());
        no_marker_and_key(l.net_devices.keys());
    }
    let wire = create.owners().to_wire();
    assert_eq!(&Ownership::from_wire(&wire), create.owners());

    let mut cfg = DefaultValidatorConfig::default();
    cfg.enable = true;
    cfg.reject_oci_hook_adjustment = true;
    cfg.reject_namespace_adjustment = true;
    cfg.reject_sysctl_adjustment = true;
    cfg.reject_unconfined_seccomp_adjustment = true;
    cfg.required_plugins = vec!["b".into()];
    cfg.reject_fields = vec!["Mounts".into()];
    if let Ok(v) = DefaultValidator::new(cfg) {
        let _ = v.validate(&build_request(&create));
    }

    let _ = create.into_response().encode_to_vec();
    let _ = update.into_response().encode_to_vec();
    let _ = stop.into_response().encode_to_vec();
});
