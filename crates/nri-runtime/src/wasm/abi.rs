//! The guest ABI of WebAssembly NRI plugins, as containerd/nri v0.12.5
//! (`pkg/api`, generated with knqyf263/go-plugin v0.9) defines it, and the
//! decoding of a guest's answer. Pure: no engine, no I/O.
//!
//! A call passes the encoded request as `(ptr, len)` in the guest's memory
//! and gets back one `i64`: the answer's address in the high 32 bits, its
//! size in the low 31, and bit 31 set when the bytes are an error string
//! instead of an encoded response. Zero is an empty response.

use super::WasmError;

/// The API version the guest's `plugin_api_version` export must return
/// (`PluginPluginAPIVersion` in containerd/nri's `pkg/api`).
pub const PLUGIN_API_VERSION: i64 = 1;

/// Export: the guest's linear memory.
pub const EXPORT_MEMORY: &str = "memory";
/// Export: `malloc(size i32) -> i32`, used for the request bytes.
pub const EXPORT_MALLOC: &str = "malloc";
/// Export: `free(ptr i32)`, for the request and the answer.
pub const EXPORT_FREE: &str = "free";
/// Export: `plugin_api_version() -> i64`.
pub const EXPORT_API_VERSION: &str = "plugin_api_version";
/// Export: the WASI reactor initializer, called once after instantiation
/// when the guest has it (Go's `-buildmode=c-shared` does).
pub const EXPORT_INITIALIZE: &str = "_initialize";

/// Import module and name of the log host function:
/// `env.log(ptr i32, len i32) -> i64`, taking an encoded `LogRequest` and
/// answering like a guest call (an empty `Empty`: zero).
pub const IMPORT_LOG: (&str, &str) = ("env", "log");

/// Bit of the answer's size word marking an error string.
pub const ERROR_FLAG: u32 = 1 << 31;

/// The guest export of each plugin method (ttRPC method name, export): the
/// guest must export all of them.
pub const METHOD_EXPORTS: [(&str, &str); 18] = [
    (nri_api::method::CONFIGURE, "plugin_configure"),
    (nri_api::method::SYNCHRONIZE, "plugin_synchronize"),
    (nri_api::method::SHUTDOWN, "plugin_shutdown"),
    (nri_api::method::RUN_POD_SANDBOX, "plugin_run_pod_sandbox"),
    (
        nri_api::method::UPDATE_POD_SANDBOX,
        "plugin_update_pod_sandbox",
    ),
    (
        nri_api::method::POST_UPDATE_POD_SANDBOX,
        "plugin_post_update_pod_sandbox",
    ),
    (nri_api::method::STOP_POD_SANDBOX, "plugin_stop_pod_sandbox"),
    (
        nri_api::method::REMOVE_POD_SANDBOX,
        "plugin_remove_pod_sandbox",
    ),
    (nri_api::method::CREATE_CONTAINER, "plugin_create_container"),
    (
        nri_api::method::POST_CREATE_CONTAINER,
        "plugin_post_create_container",
    ),
    (nri_api::method::START_CONTAINER, "plugin_start_container"),
    (
        nri_api::method::POST_START_CONTAINER,
        "plugin_post_start_container",
    ),
    (nri_api::method::UPDATE_CONTAINER, "plugin_update_container"),
    (
        nri_api::method::POST_UPDATE_CONTAINER,
        "plugin_post_update_container",
    ),
    (nri_api::method::STOP_CONTAINER, "plugin_stop_container"),
    (nri_api::method::REMOVE_CONTAINER, "plugin_remove_container"),
    (nri_api::method::STATE_CHANGE, "plugin_state_change"),
    (
        nri_api::method::VALIDATE_CONTAINER_ADJUSTMENT,
        "plugin_validate_container_adjustment",
    ),
];

/// The `i64` a guest call returned, taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packed {
    /// Address of the answer in the guest's memory.
    pub ptr: u32,
    /// Size of the answer in bytes.
    pub len: u32,
    /// The answer is an error string, not an encoded response.
    pub is_error: bool,
}

impl Packed {
    /// Takes a guest call's result apart.
    pub fn unpack(raw: i64) -> Self {
        // Bit patterns: the i64 is the guest's u64.
        let raw = raw as u64;
        let ptr = (raw >> 32) as u32;
        let size = raw as u32;
        Self {
            ptr,
            len: size & !ERROR_FLAG,
            is_error: size & ERROR_FLAG != 0,
        }
    }
}

/// A guest's answer, read out of its memory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer<'m> {
    /// The encoded response message (empty: the default response).
    Message(&'m [u8]),
    /// The error the guest's handler returned, as text.
    Error(String),
}

/// Reads the answer a guest call returned (`raw`) out of the guest's
/// memory, refusing an answer over `max_len` bytes or outside the memory.
///
/// # Errors
///
/// [`WasmError::AnswerTooLarge`] or [`WasmError::OutOfBounds`].
pub fn read_answer(raw: i64, memory: &[u8], max_len: usize) -> Result<Answer<'_>, WasmError> {
    let p = Packed::unpack(raw);
    let bytes = guest_slice(memory, p.ptr, p.len, max_len)?;
    if p.is_error {
        Ok(Answer::Error(String::from_utf8_lossy(bytes).into_owned()))
    } else {
        Ok(Answer::Message(bytes))
    }
}

/// The bytes `[ptr, ptr + len)` of the guest's memory, when that range is
/// inside it and `len` is at most `max_len`.
///
/// # Errors
///
/// [`WasmError::AnswerTooLarge`] or [`WasmError::OutOfBounds`].
pub fn guest_slice(memory: &[u8], ptr: u32, len: u32, max_len: usize) -> Result<&[u8], WasmError> {
    let n = len as usize;
    if n > max_len {
        return Err(WasmError::AnswerTooLarge {
            len: n,
            max: max_len,
        });
    }
    let start = ptr as usize;
    start
        .checked_add(n)
        .and_then(|end| memory.get(start..end))
        .ok_or(WasmError::OutOfBounds {
            ptr,
            len,
            memory: memory.len(),
        })
}
