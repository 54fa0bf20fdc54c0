//! Reading a WebAssembly guest's answer (`nri_runtime::wasm::abi`) on
//! arbitrary results and memories: never panics, never reads outside the
//! memory or past the size limit, and what it returns is exactly the range
//! the packed result names; a response that is read then decodes (or not)
//! without panicking, as the runtime does with it.
//!
//! Input: 8 bytes of the guest's `i64` result (little-endian), 4 bytes of
//! size limit, then the guest's memory.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nri_api::api::CreateContainerResponse;
use nri_runtime::wasm::abi::{Answer, Packed, read_answer};
use nri_runtime::wasm::WasmError;
use prost::Message;

fuzz_target!(|data: &[u8]| {
    let Some((head, memory)) = data.split_at_checked(12) else {
        return;
    };
    let raw = i64::from_le_bytes(head[..8].try_into().unwrap_or_default());
    let max = u32::from_le_bytes(head[8..12].try_into().unwrap_or_default()) as usize % 4096;
    let p = Packed::unpack(raw);
    match read_answer(raw, memory, max) {
        Ok(answer) => {
            let start = p.ptr as usize;
            let end = start + p.len as usize;
            assert!(p.len as usize <= max && end <= memory.len());
            match answer {
                Answer::Message(b) => {
                    assert!(!p.is_error);
                    assert_eq!(b, &memory[start..end]);
                    let _ = CreateContainerResponse::decode(b);
                }
                Answer::Error(s) => {
                    assert!(p.is_error);
                    assert_eq!(s, String::from_utf8_lossy(&memory[start..end]));
                }
            }
        }
        Err(WasmError::AnswerTooLarge { len, .. }) => assert!(len > max),
        Err(WasmError::OutOfBounds { ptr, len, memory: m }) => {
            assert_eq!((ptr, len, m), (p.ptr, p.len, memory.len()));
            assert!(p.ptr as usize + p.len as usize > memory.len());
        }
        Err(e) => panic!("unexpected error {e:?}"),
    }
});
