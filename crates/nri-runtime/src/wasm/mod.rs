//! WebAssembly plugins: `.wasm` files in the plugin directory, run inside
//! the runtime process on the `wasmi` interpreter (cargo feature `wasm`,
//! on by default), sandboxed, with the guest ABI of containerd/nri's
//! WebAssembly plugins (see [`abi`] and `docs/runtime/wasm.md`).
//!
//! Layout: [`abi`] (the guest ABI and answer decoding, pure) and
//! [`WasmLimits`] are always built; with the feature, `host` (engine, one
//! store and instance per plugin, calls with fuel slices and a deadline),
//! `wasi` (the small WASI preview 1 layer) and `start` (load, Configure,
//! Synchronize, supervision) make a WASM plugin one more kind of plugin
//! connection for the rest of the runtime.

use std::time::Duration;

pub mod abi;
#[cfg(all(test, feature = "wasm"))]
mod calibrate;
#[cfg(feature = "wasm")]
mod census;
#[cfg(feature = "wasm")]
pub(crate) mod conn;
pub(crate) mod file_config;
#[cfg(feature = "wasm")]
pub(crate) mod host;
#[cfg(feature = "wasm")]
mod image;
#[cfg(feature = "wasm")]
mod log;
#[cfg(feature = "wasm")]
mod pace;
#[cfg(feature = "wasm")]
mod restart;
#[cfg(feature = "wasm")]
mod start;
#[cfg(feature = "wasm")]
mod wasi;

/// Loads `wasm` the way the runtime loads a WebAssembly plugin (compile,
/// link against the host functions, instantiate, run the guest's
/// initializer, check its API version and exports) within `timeout`, then
/// drops it. Blocks the calling thread while the guest initializes.
///
/// # Errors
///
/// What the runtime would refuse the module for.
///
/// ```
/// use std::time::Duration;
/// use nri_runtime::wasm::{WasmError, WasmLimits, check_module};
///
/// let err = check_module(b"not wasm", &WasmLimits::default(), Duration::from_secs(1));
/// assert!(matches!(err, Err(WasmError::Compile { .. })));
/// ```
#[cfg(feature = "wasm")]
pub fn check_module(
    wasm: &[u8],
    limits: &WasmLimits,
    timeout: std::time::Duration,
) -> Result<(), WasmError> {
    let deadline = std::time::Instant::now() + timeout;
    host::Guest::load("check", wasm, limits, deadline).map(drop)
}

/// Default of [`WasmLimits::max_memory`]: 64 MiB.
pub const DEFAULT_WASM_MAX_MEMORY: usize = 64 * 1024 * 1024;
/// Default of [`WasmLimits::fuel_slice`]: fuel a guest uses between two
/// checks of its request's deadline (at most about 10 ms of work; see
/// `docs/runtime/wasm.md` for the measurement).
pub const DEFAULT_WASM_FUEL_SLICE: u64 = 2_000_000;
/// Default of [`WasmLimits::max_module_size`]: 256 MiB.
pub const DEFAULT_WASM_MAX_MODULE_SIZE: u64 = 256 * 1024 * 1024;
/// Default of [`WasmLimits::max_table_elements`]: 100,000 elements (400
/// KB) per table; a Go-built guest has one table of about 11,000.
pub const DEFAULT_WASM_MAX_TABLE_ELEMENTS: u32 = 100_000;
/// Default of [`WasmLimits::restart_backoff`]: 100 ms.
pub const DEFAULT_WASM_RESTART_BACKOFF: Duration = Duration::from_millis(100);
/// Default of [`WasmLimits::max_restart_backoff`]: 30 s.
pub const DEFAULT_WASM_MAX_RESTART_BACKOFF: Duration = Duration::from_secs(30);

/// Most tables a module may have (each bounded by
/// [`WasmLimits::max_table_elements`]).
pub const WASM_MAX_TABLES: u32 = 4;
/// Most globals a module may have (a Go-built guest has 8).
pub const WASM_MAX_GLOBALS: u32 = 1_000;
/// Most element segments a module may have (a Go-built guest has 1).
pub const WASM_MAX_ELEMENT_SEGMENTS: u32 = 1_000;
/// Most items of all element segments together (a Go-built guest has
/// about 11,300): the engine keeps each segment's items (a few bytes
/// each) for the module's life, and an item is one byte of WebAssembly.
pub const WASM_MAX_ELEMENT_ITEMS: u32 = 1_000_000;
/// Most data segments a module may have (a Go-built guest has 100,000:
/// Go writes its data in small segments).
pub const WASM_MAX_DATA_SEGMENTS: u32 = 1_000_000;
/// Most functions a module may have, its imports included (a Go-built
/// guest has about 7,200).
pub const WASM_MAX_FUNCTIONS: u32 = 1_000_000;
/// Largest function body, in bytes (a Go-built guest's largest is about
/// 41 KB): bounds the engine's translation of one function, which happens
/// at its first call, costs no fuel and cannot be paused (measured: about
/// 100 ns a byte, so about 13 ms for the largest).
pub const WASM_MAX_FUNCTION_SIZE: u32 = 128 * 1024;
/// Most locals of one function, its parameters left out (a Go-built
/// guest's largest has 20): the engine zeroes a function's locals at
/// each call without charging fuel for them, so a call costs time in
/// proportion to them (a function of 1,000 locals about 15 times an
/// ordinary instruction's per unit of fuel; see `docs/runtime/wasm.md`).
pub const WASM_MAX_LOCALS: u32 = 1_000;
/// Most imports a module may have (a Go-built guest has 29).
pub const WASM_MAX_IMPORTS: u32 = 1_000;

/// What one WebAssembly plugin may use, and how it is restarted.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WasmLimits {
    /// Largest linear memory of one plugin, in bytes (default 64 MiB). A
    /// guest that grows past it traps, which discards its instance.
    pub max_memory: usize,
    /// Fuel (about one unit per instruction; host functions and bulk
    /// copies are charged by the byte) a guest uses between two checks of
    /// its request's deadline (default [`DEFAULT_WASM_FUEL_SLICE`]).
    /// Smaller slices stop a runaway guest closer to its deadline, at a
    /// small cost per slice.
    pub fuel_slice: u64,
    /// Largest `.wasm` file loaded (default 256 MiB).
    pub max_module_size: u64,
    /// Most elements of one table, at instantiation and after growing
    /// (default [`DEFAULT_WASM_MAX_TABLE_ELEMENTS`]). A module declaring a
    /// larger table is refused at load; a guest growing one past it traps.
    pub max_table_elements: u32,
    /// Wait before the first re-instantiation of a plugin whose instance
    /// was discarded (a timeout, a trap); doubled after each discarded
    /// instance that did not live a minute, up to
    /// [`WasmLimits::max_restart_backoff`] (default 100 ms).
    pub restart_backoff: Duration,
    /// Longest wait before a re-instantiation (default 30 s).
    pub max_restart_backoff: Duration,
    /// Bytes of log lines (`env.log`, standard output and error) the
    /// plugin may write at once, across its instances (default
    /// [`DEFAULT_WASM_LOG_BURST`]); lines over its budget are dropped and
    /// counted.
    pub log_burst: u64,
    /// Bytes a second the log budget refills (default
    /// [`DEFAULT_WASM_LOG_RATE`]).
    pub log_rate: u64,
}

/// Default [`WasmLimits::log_burst`]: 1 MiB.
pub const DEFAULT_WASM_LOG_BURST: u64 = 1024 * 1024;
/// Default [`WasmLimits::log_rate`]: 64 KiB a second.
pub const DEFAULT_WASM_LOG_RATE: u64 = 64 * 1024;

impl Default for WasmLimits {
    fn default() -> Self {
        Self {
            max_memory: DEFAULT_WASM_MAX_MEMORY,
            fuel_slice: DEFAULT_WASM_FUEL_SLICE,
            max_module_size: DEFAULT_WASM_MAX_MODULE_SIZE,
            max_table_elements: DEFAULT_WASM_MAX_TABLE_ELEMENTS,
            restart_backoff: DEFAULT_WASM_RESTART_BACKOFF,
            max_restart_backoff: DEFAULT_WASM_MAX_RESTART_BACKOFF,
            log_burst: DEFAULT_WASM_LOG_BURST,
            log_rate: DEFAULT_WASM_LOG_RATE,
        }
    }
}

impl WasmLimits {
    /// Sets [`WasmLimits::max_memory`].
    #[must_use]
    pub fn with_max_memory(mut self, bytes: usize) -> Self {
        self.max_memory = bytes;
        self
    }

    /// Sets [`WasmLimits::fuel_slice`] (at least 1).
    #[must_use]
    pub fn with_fuel_slice(mut self, fuel: u64) -> Self {
        self.fuel_slice = fuel.max(1);
        self
    }

    /// Sets [`WasmLimits::max_module_size`].
    #[must_use]
    pub fn with_max_module_size(mut self, bytes: u64) -> Self {
        self.max_module_size = bytes;
        self
    }

    /// Sets [`WasmLimits::max_table_elements`].
    #[must_use]
    pub fn with_max_table_elements(mut self, elements: u32) -> Self {
        self.max_table_elements = elements;
        self
    }

    /// Sets [`WasmLimits::restart_backoff`] and
    /// [`WasmLimits::max_restart_backoff`] (raised to `first` if smaller).
    #[must_use]
    pub fn with_restart_backoff(mut self, first: Duration, max: Duration) -> Self {
        self.restart_backoff = first;
        self.max_restart_backoff = max.max(first);
        self
    }

    /// Sets [`WasmLimits::log_burst`] and [`WasmLimits::log_rate`].
    #[must_use]
    pub fn with_log_budget(mut self, burst: u64, per_second: u64) -> Self {
        self.log_burst = burst;
        self.log_rate = per_second;
        self
    }
}

/// Why a WebAssembly plugin could not be loaded, or what was wrong with
/// one of its answers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WasmError {
    /// This build of the runtime has no WebAssembly engine (the `wasm`
    /// feature is off).
    #[error("WebAssembly support is not built in (cargo feature `wasm`)")]
    Disabled,
    /// The module file is larger than [`WasmLimits::max_module_size`].
    #[error("module of {size} bytes is over the limit of {max}")]
    ModuleTooLarge {
        /// The file's size.
        size: u64,
        /// The limit.
        max: u64,
    },
    /// The module is not valid WebAssembly (or uses features the engine
    /// does not enable).
    #[error("invalid module: {message}")]
    Compile {
        /// The engine's message.
        message: String,
    },
    /// The module imports something the host does not provide.
    #[error("module imports {module}.{name}, which this host does not provide")]
    MissingImport {
        /// Import module.
        module: String,
        /// Import name.
        name: String,
    },
    /// The module lacks an export of the plugin ABI, or has it with the
    /// wrong type.
    #[error("module does not export {name} as the plugin ABI requires")]
    MissingExport {
        /// The export.
        name: String,
    },
    /// `plugin_api_version` returned another version.
    #[error("guest API version {found}, this host speaks {expected}")]
    ApiVersion {
        /// What the guest returned.
        found: i64,
        /// [`abi::PLUGIN_API_VERSION`].
        expected: i64,
    },
    /// Instantiation or the guest's initialization failed (a trap, an
    /// exit, a memory over the limit).
    #[error("instantiation failed: {message}")]
    Instantiate {
        /// The engine's or guest's message.
        message: String,
    },
    /// An answer (or the request buffer the guest allocated) lies outside
    /// the guest's memory.
    #[error("range {ptr:#x}+{len} is outside the guest's {memory}-byte memory")]
    OutOfBounds {
        /// Address the guest gave.
        ptr: u32,
        /// Length.
        len: u32,
        /// Size of the guest's memory.
        memory: usize,
    },
    /// The module declares more of a resource than the host allows (see
    /// `docs/runtime/wasm.md`, "Limits"): refused before it is compiled.
    #[error("module has {found} {resource}, over the limit of {max}")]
    OverLimit {
        /// What is counted ("tables", "elements in one table", ...).
        resource: String,
        /// How many the module has.
        found: u64,
        /// The limit.
        max: u64,
    },
    /// Compiling, instantiating and initializing the module took longer
    /// than the registration timeout.
    #[error("loading took longer than the registration timeout of {timeout:?}")]
    LoadTimeout {
        /// The registration timeout.
        timeout: Duration,
    },
    /// An answer is larger than the protocol's message cap.
    #[error("answer of {len} bytes is over the limit of {max}")]
    AnswerTooLarge {
        /// The size the guest gave.
        len: usize,
        /// The limit.
        max: usize,
    },
}

#[cfg(not(feature = "wasm"))]
impl crate::adaptation::Shared {
    /// Without the engine, a WebAssembly plugin cannot start.
    pub(crate) async fn start_wasm(
        self: std::sync::Arc<Self>,
        d: crate::launch::DiscoveredPlugin,
    ) -> Result<std::sync::Arc<crate::plugin::Plugin>, crate::Error> {
        Err(crate::Error::WasmLoad {
            plugin: d.id.to_string(),
            path: d.path.display().to_string(),
            source: WasmError::Disabled,
        })
    }
}
