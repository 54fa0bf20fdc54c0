//! The pre-decoding scanner (`nri_api::scan`) against prost on arbitrary
//! bytes: it never panics, it accepts exactly what prost decodes, and for
//! what decodes its entry counts are prost's vector lengths and its size
//! estimate is at least the decoded message's struct.
//!
//! The first byte selects one message type (so libFuzzer can specialise its
//! corpus per type); with its high bit set the input is tried against all.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_api::api;
use nri_api::scan::scan;
use prost::Message;

fn agree<M: Message + Default + prost::Name>(data: &[u8]) -> Option<(nri_api::scan::Scan, M)> {
    let scanned = scan::<M>(data);
    let decoded = M::decode(data);
    assert_eq!(
        scanned.is_ok(),
        decoded.is_ok(),
        "{}: scan {:?}, prost {:?}",
        M::NAME,
        scanned.as_ref().err(),
        decoded.as_ref().err()
    );
    let scanned = scanned.ok()?;
    assert!(scanned.decoded_size() >= size_of::<M>());
    assert_eq!(scanned.wire_len(), data.len());
    Some((scanned, decoded.ok()?))
}

fn check<M: Message + Default + prost::Name>(data: &[u8]) {
    let _ = agree::<M>(data);
}

/// The messages whose counts receivers cap: counts are prost's lengths.
fn counted(data: &[u8]) {
    if let Some((s, m)) = agree::<api::UpdateContainersRequest>(data) {
        assert_eq!((s.count("update"), s.count("evict")), (m.update.len(), m.evict.len()));
    }
    if let Some((s, m)) = agree::<api::CreateContainerResponse>(data) {
        assert_eq!((s.count("update"), s.count("evict")), (m.update.len(), m.evict.len()));
    }
    if let Some((s, m)) = agree::<api::SynchronizeRequest>(data) {
        assert_eq!(
            (s.count("pods"), s.count("containers")),
            (m.pods.len(), m.containers.len())
        );
    }
}

macro_rules! all_types {
    ($($t:ty),* $(,)?) => {
        const FNS: &[fn(&[u8])] = &[$(check::<$t>),*];
    };
}
nri_api::for_each_message!(all_types);

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    counted(rest);
    if sel & 0x80 == 0 {
        FNS[usize::from(sel) % FNS.len()](rest);
    } else {
        for f in FNS {
            f(rest);
        }
    }
});
