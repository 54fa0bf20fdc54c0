//! Arbitrary bytes decoded as every NRI protocol message type
//! (`nri_api::for_each_message!`). Decoding must never panic; whatever
//! decodes must survive a round trip: `encode(decode(x))` decodes to an
//! equal message, re-encodes to the same bytes (our encoding is
//! deterministic: maps are `BTreeMap`s), and `encoded_len` is exact.
//!
//! The first byte selects one message type (so libFuzzer can specialise its
//! corpus per type); every input is also tried against all types, which
//! covers type confusion (a payload for one method handed to another).
#![no_main]

use libfuzzer_sys::fuzz_target;
use prost::Message;

fn round_trip<M: Message + Default + PartialEq + std::fmt::Debug>(data: &[u8]) {
    let Ok(first) = M::decode(data) else {
        return;
    };
    let bytes = first.encode_to_vec();
    assert_eq!(bytes.len(), first.encoded_len(), "encoded_len is exact");
    let second = match M::decode(bytes.as_slice()) {
        Ok(m) => m,
        Err(e) => panic!("re-decoding our own encoding failed: {e}; {first:?}"),
    };
    assert_eq!(first, second, "round trip changed the message");
    assert_eq!(bytes, second.encode_to_vec(), "encoding is not deterministic");
    // Length-delimited framing of the same message.
    let delimited = first.encode_length_delimited_to_vec();
    let third = M::decode_length_delimited(delimited.as_slice()).expect("own delimited encoding");
    assert_eq!(first, third);
}

macro_rules! all_types {
    ($($t:ty),* $(,)?) => {
        const FNS: &[fn(&[u8])] = &[$(round_trip::<$t>),*];
    };
}
nri_api::for_each_message!(all_types);

fuzz_target!(|data: &[u8]| {
    let Some((&sel, rest)) = data.split_first() else {
        return;
    };
    if sel & 0x80 == 0 {
        FNS[usize::from(sel) % FNS.len()](rest);
    } else {
        for f in FNS {
            f(rest);
        }
    }
});
