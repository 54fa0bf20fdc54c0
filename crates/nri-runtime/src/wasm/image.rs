//! A compiled module kept for the plugin's life ([`Image`]): its engine,
//! module and linker, counted and checked before compiling ([`Census`]),
//! from which an instance ([`Guest`]) is made at start, and made again
//! without compiling when one had to be discarded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use wasmi::errors::{MemoryError, TableError};
use wasmi::{Engine, Linker, Module, ResourceLimiter, Store, Val};
use wasmi_core::LimiterError;

use super::abi;
use super::census::Census;
use super::host::{CallError, Guest, describe, export};
use super::log::LogBudget;
use super::pace::{Pace, max_slice};
use super::wasi::{self, HostState};
use super::{WASM_MAX_TABLES, WasmError, WasmLimits};

/// Most fuel the module's own start function (if any) may use. It runs
/// inside instantiation, which the engine cannot pause to look at the
/// deadline or time a slice: this fuel is its bound, the default fuel
/// slice (or the configured slice, if smaller), about what one slice of
/// the costliest instructions runs in 10 ms (see `docs/runtime/wasm.md`,
/// "Time"). The `_initialize` export, which Go's and other toolchains'
/// reactors use instead, runs in timed slices up to the deadline.
const START_FUEL: u64 = super::DEFAULT_WASM_FUEL_SLICE;
/// Fuel a call runs on the caller's task before the rest of it moves to a
/// blocking thread (when the guest's slice is smaller, one slice): at
/// most about 100 µs of guest work (see `docs/runtime/wasm.md`), so the
/// executor is never held longer, and a guest that answers within it (a
/// no-op, a filter that looks at a label) costs no thread hop at all.
pub(crate) const INLINE_FUEL: u64 = 20_000;

/// Bytes a bulk instruction (`memory.copy`, `memory.fill`, `memory.grow`,
/// `table.grow`, ...) copies or writes per unit of fuel: measured, a
/// `memory.copy` of 32 MiB costs about what an ordinary instruction
/// does per unit at 16 (at 64 it cost four times as much time per unit).
pub(crate) const BYTES_PER_FUEL: u32 = 16;

/// The engine a guest is compiled for: fuel metered, functions translated
/// lazily at their first call (which costs no fuel: the census bounds a
/// function's size, and so its translation, see
/// [`super::WASM_MAX_FUNCTION_SIZE`]).
pub(super) fn engine() -> Engine {
    let mut cfg = wasmi::Config::default();
    cfg.consume_fuel(true);
    cfg.fuel_cost(wasmi::CustomFuelCosts {
        bytes_copied_per_fuel: BYTES_PER_FUEL,
        fuel_per_bytes_translated: 0,
        fuel_per_bytes_validated: 0,
    });
    Engine::new(&cfg)
}

/// The bounds of one instance's store (its resource limiter): memory and
/// table sizes, at instantiation and when the guest grows them, and one
/// instance, one memory, [`WASM_MAX_TABLES`] tables. A growth past a bound
/// traps. Unlike wasmi's `StoreLimits` (which, set to trap, traps on any
/// failed growth), a growth that only lacks fuel does not trap: the
/// engine pauses the call for more fuel, as for any instruction, so a
/// guest growing its memory near the end of a fuel slice is not killed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GuestLimits {
    memory: usize,
    table_elements: usize,
}

/// `desired` against `limit` and the module's own `maximum`: past the
/// limit a trap, past the maximum a failed growth (-1), as WebAssembly
/// says.
fn grow(desired: usize, limit: usize, maximum: Option<usize>) -> Result<bool, LimiterError> {
    if desired > limit {
        return Err(LimiterError::ResourceLimiterDeniedAllocation);
    }
    Ok(maximum.is_none_or(|m| desired <= m))
}

impl GuestLimits {
    /// The bounds `limits` sets.
    pub(super) fn new(limits: &WasmLimits) -> Self {
        GuestLimits {
            memory: limits.max_memory,
            table_elements: limits.max_table_elements as usize,
        }
    }
}

impl ResourceLimiter for GuestLimits {
    fn memory_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool, LimiterError> {
        grow(desired, self.memory, maximum)
    }

    fn table_growing(
        &mut self,
        _current: usize,
        desired: usize,
        maximum: Option<usize>,
    ) -> Result<bool, LimiterError> {
        grow(desired, self.table_elements, maximum)
    }

    fn memory_grow_failed(&mut self, _error: &MemoryError) -> Result<(), LimiterError> {
        Ok(())
    }

    fn table_grow_failed(&mut self, _error: &TableError) -> Result<(), LimiterError> {
        Ok(())
    }

    fn instances(&self) -> usize {
        1
    }

    fn tables(&self) -> usize {
        WASM_MAX_TABLES as usize
    }

    fn memories(&self) -> usize {
        1
    }
}

/// A module compiled for one plugin, with what instantiating it needs.
pub(crate) struct Image {
    /// Kept alive for the module's lazily translated functions.
    engine: Engine,
    module: Module,
    linker: Linker<HostState>,
    limits: WasmLimits,
    census: Census,
    /// The plugin's log budget, shared by its instances.
    log_budget: Arc<Mutex<LogBudget>>,
}

impl std::fmt::Debug for Image {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Image")
            .field("census", &self.census)
            .finish_non_exhaustive()
    }
}

impl Image {
    /// Counts `wasm` against `limits` and the fixed bounds, then compiles
    /// and links it.
    ///
    /// # Errors
    ///
    /// [`WasmError::OverLimit`], [`WasmError::Compile`],
    /// [`WasmError::MissingImport`].
    pub(crate) fn compile(wasm: &[u8], limits: &WasmLimits) -> Result<Self, WasmError> {
        let census = Census::take(wasm, limits)?;
        let engine = engine();
        let module = Module::new(&engine, wasm).map_err(|e| WasmError::Compile {
            message: e.to_string(),
        })?;
        let linker = wasi::linker(&module)?;
        Ok(Image {
            engine,
            module,
            linker,
            limits: limits.clone(),
            census,
            log_budget: Arc::new(Mutex::new(LogBudget::with_rate(
                limits.log_burst,
                limits.log_rate,
                Instant::now(),
            ))),
        })
    }

    /// What the module declares, counted.
    pub(crate) fn census(&self) -> &Census {
        &self.census
    }

    /// A new instance for `plugin`: instantiated (the start function, if
    /// any, within its fuel), its initializer run and its API version and
    /// exports checked, all before `deadline`, unless `closed` is
    /// cancelled first (the load was given up: the runtime stops, or the
    /// registration timeout passed): the start function's sleeps and host
    /// functions, and the initializer between its fuel slices, see it as a
    /// call sees its plugin's closing.
    ///
    /// # Errors
    ///
    /// [`WasmError::Instantiate`], [`WasmError::MissingExport`],
    /// [`WasmError::ApiVersion`].
    pub(crate) fn instantiate(
        &self,
        plugin: &str,
        deadline: Instant,
        closed: &CancellationToken,
    ) -> Result<Guest, WasmError> {
        let limits = &self.limits;
        let state = HostState {
            plugin: plugin.to_owned(),
            limits: GuestLimits::new(limits),
            deadline: Some(deadline),
            epoch: Instant::now(),
            closed: closed.clone(),
            inline: false,
            log_budget: self.log_budget.clone(),
            slept: std::cell::Cell::default(),
        };
        let mut store = Store::new(&self.engine, state);
        store.limiter(|s| &mut s.limits);
        let instantiate = |message: String| WasmError::Instantiate { message };
        let slice = limits.fuel_slice.max(1);
        store
            .set_fuel(slice.min(START_FUEL))
            .map_err(|e| instantiate(e.to_string()))?;
        let instance = self
            .linker
            .instantiate_and_start(&mut store, &self.module)
            .map_err(|e| instantiate(e.to_string()))?;
        let missing = |name: &str| WasmError::MissingExport {
            name: name.to_owned(),
        };
        let memory = instance
            .get_memory(&store, abi::EXPORT_MEMORY)
            .ok_or_else(|| missing(abi::EXPORT_MEMORY))?;
        let malloc = export::<i32, i32>(&instance, &store, abi::EXPORT_MALLOC)?;
        let free = export::<i32, ()>(&instance, &store, abi::EXPORT_FREE)?;
        let version = export::<(), i64>(&instance, &store, abi::EXPORT_API_VERSION)?;
        let mut methods = HashMap::new();
        for (method, name) in abi::METHOD_EXPORTS {
            methods.insert(method, export::<(i32, i32), i64>(&instance, &store, name)?);
        }
        let init = instance.get_typed_func::<(), ()>(&store, abi::EXPORT_INITIALIZE);
        let mut guest = Guest {
            store,
            memory,
            malloc,
            free,
            methods,
            pace: Pace::new(max_slice(slice, self.census.most_locals)),
            inline_fuel: INLINE_FUEL.min(slice),
        };
        let failed = |e: CallError| instantiate(describe(&e));
        if let Ok(init) = init {
            match guest.run_blocking(*init.func(), &mut [], deadline, closed) {
                Ok(()) => {}
                // An initializer that exits with status 0 is done (as
                // upstream's host accepts it).
                Err(CallError::Fatal(m)) if m == "guest exited with status 0" => {}
                Err(e) => return Err(failed(e)),
            }
        }
        let mut out = [Val::I64(0)];
        guest
            .run_blocking(version, &mut out, deadline, closed)
            .map_err(failed)?;
        let found = out[0].i64().unwrap_or_default();
        if found != abi::PLUGIN_API_VERSION {
            return Err(WasmError::ApiVersion {
                found,
                expected: abi::PLUGIN_API_VERSION,
            });
        }
        Ok(guest)
    }
}

impl Guest {
    /// Compiles and instantiates `wasm` for `plugin` (see
    /// [`Image::compile`], [`Image::instantiate`]), all before `deadline`.
    pub(crate) fn load(
        plugin: &str,
        wasm: &[u8],
        limits: &WasmLimits,
        deadline: Instant,
    ) -> Result<Guest, WasmError> {
        Image::compile(wasm, limits)?.instantiate(plugin, deadline, &CancellationToken::new())
    }
}
