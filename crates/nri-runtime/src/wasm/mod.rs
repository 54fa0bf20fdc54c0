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

pub mod abi;
pub(crate) mod file_config;
#[cfg(feature = "wasm")]
pub(crate) mod host;
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
/// Default of [`WasmLimits::fuel_slice`]: instructions a guest runs between
/// two checks of its request's deadline (a few milliseconds of work).
pub const DEFAULT_WASM_FUEL_SLICE: u64 = 2_000_000;
/// Default of [`WasmLimits::max_module_size`]: 256 MiB.
pub const DEFAULT_WASM_MAX_MODULE_SIZE: u64 = 256 * 1024 * 1024;

/// What one WebAssembly plugin may use.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct WasmLimits {
    /// Largest linear memory of one plugin, in bytes (default 64 MiB). A
    /// guest that grows past it traps, which closes it.
    pub max_memory: usize,
    /// Instructions (wasmi fuel) a guest runs between two checks of its
    /// request's deadline (default [`DEFAULT_WASM_FUEL_SLICE`]). Smaller
    /// slices stop a runaway guest closer to its deadline, at a small cost
    /// per slice.
    pub fuel_slice: u64,
    /// Largest `.wasm` file loaded (default 256 MiB).
    pub max_module_size: u64,
}

impl Default for WasmLimits {
    fn default() -> Self {
        Self {
            max_memory: DEFAULT_WASM_MAX_MEMORY,
            fuel_slice: DEFAULT_WASM_FUEL_SLICE,
            max_module_size: DEFAULT_WASM_MAX_MODULE_SIZE,
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
