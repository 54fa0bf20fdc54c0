//! The count of what a module would make the host allocate, taken before
//! the engine compiles it: tables and their elements, memories, globals,
//! element and data segments, functions and their bodies, imports. Each
//! is checked against a bound (fixed here, or in [`WasmLimits`]), so that
//! a small module cannot make the runtime allocate gigabytes (a table of
//! a billion elements is six bytes of WebAssembly) or spend long in the
//! engine's translation of one huge function.
//!
//! One pass over the sections, no validation (the engine validates after
//! this pass accepts the module).

use wasmparser::{ElementItems, Parser, Payload, TypeRef};

use super::{
    WASM_MAX_DATA_SEGMENTS, WASM_MAX_ELEMENT_ITEMS, WASM_MAX_ELEMENT_SEGMENTS,
    WASM_MAX_FUNCTION_SIZE, WASM_MAX_FUNCTIONS, WASM_MAX_GLOBALS, WASM_MAX_IMPORTS,
    WASM_MAX_LOCALS, WASM_MAX_TABLES, WasmError, WasmLimits,
};

/// What a module declares, counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Census {
    pub(crate) imports: u64,
    pub(crate) functions: u64,
    pub(crate) tables: u64,
    /// Initial elements of all tables together.
    pub(crate) table_elements: u64,
    pub(crate) memories: u64,
    /// Initial size of the memory, in bytes.
    pub(crate) memory_bytes: u64,
    pub(crate) globals: u64,
    pub(crate) element_segments: u64,
    /// Items of all element segments together.
    pub(crate) element_items: u64,
    pub(crate) data_segments: u64,
    /// Size of the largest function body, in bytes.
    pub(crate) largest_function: u64,
    /// Most locals of one function (parameters left out).
    pub(crate) most_locals: u64,
}

/// The error for `found` of `resource` over `max`.
fn over(resource: &str, found: u64, max: u64) -> WasmError {
    WasmError::OverLimit {
        resource: resource.to_owned(),
        found,
        max,
    }
}

/// Checks `found` against `max`.
fn bound(resource: &str, found: u64, max: u64) -> Result<(), WasmError> {
    if found > max {
        return Err(over(resource, found, max));
    }
    Ok(())
}

impl Census {
    /// Counts `wasm` and checks every count against its bound.
    ///
    /// # Errors
    ///
    /// [`WasmError::OverLimit`] naming the first resource over its bound;
    /// [`WasmError::Compile`] for a module whose sections cannot be read.
    pub(crate) fn take(wasm: &[u8], limits: &WasmLimits) -> Result<Census, WasmError> {
        let mut c = Census::default();
        for payload in Parser::new(0).parse_all(wasm) {
            let payload = payload.map_err(|e| WasmError::Compile {
                message: e.to_string(),
            })?;
            c.count(payload, limits).map_err(|e| e.into_wasm_error())?;
        }
        Ok(c)
    }

    /// Counts one section (a table is checked as soon as it is read).
    fn count(&mut self, payload: Payload<'_>, limits: &WasmLimits) -> Result<(), CensusError> {
        match payload {
            Payload::ImportSection(r) => {
                self.imports += u64::from(r.count());
                bound("imports", self.imports, u64::from(WASM_MAX_IMPORTS))?;
                for import in r {
                    match import?.ty {
                        TypeRef::Func(_) => self.functions += 1,
                        TypeRef::Table(t) => self.table(t.initial, limits)?,
                        TypeRef::Memory(m) => self.memory(m.initial, m.page_size_log2, limits)?,
                        TypeRef::Global(_) => self.globals += 1,
                        TypeRef::Tag(_) => {}
                    }
                }
            }
            Payload::FunctionSection(r) => self.functions += u64::from(r.count()),
            Payload::TableSection(r) => {
                for t in r {
                    self.table(t?.ty.initial, limits)?;
                }
            }
            Payload::MemorySection(r) => {
                for m in r {
                    let m = m?;
                    self.memory(m.initial, m.page_size_log2, limits)?;
                }
            }
            Payload::GlobalSection(r) => self.globals += u64::from(r.count()),
            Payload::ElementSection(r) => {
                self.element_segments += u64::from(r.count());
                bound(
                    "element segments",
                    self.element_segments,
                    u64::from(WASM_MAX_ELEMENT_SEGMENTS),
                )?;
                for e in r {
                    self.element_items += u64::from(match e?.items {
                        ElementItems::Functions(f) => f.count(),
                        ElementItems::Expressions(_, x) => x.count(),
                    });
                    bound(
                        "element items",
                        self.element_items,
                        u64::from(WASM_MAX_ELEMENT_ITEMS),
                    )?;
                }
            }
            Payload::DataSection(r) => self.data_segments += u64::from(r.count()),
            Payload::CodeSectionEntry(body) => {
                let size = body.range().len() as u64;
                self.largest_function = self.largest_function.max(size);
                bound(
                    "bytes in one function body",
                    size,
                    u64::from(WASM_MAX_FUNCTION_SIZE),
                )?;
                let mut locals = 0u64;
                for group in body.get_locals_reader()? {
                    locals += u64::from(group?.0);
                    bound("locals in one function", locals, u64::from(WASM_MAX_LOCALS))?;
                }
                self.most_locals = self.most_locals.max(locals);
            }
            _ => {}
        }
        self.check()?;
        Ok(())
    }

    /// Counts one table of `initial` elements.
    fn table(&mut self, initial: u64, limits: &WasmLimits) -> Result<(), WasmError> {
        self.tables += 1;
        bound("tables", self.tables, u64::from(WASM_MAX_TABLES))?;
        bound(
            "elements in one table",
            initial,
            u64::from(limits.max_table_elements),
        )?;
        self.table_elements += initial;
        Ok(())
    }

    /// Counts one memory of `initial` pages of `2^page_log2` bytes.
    fn memory(
        &mut self,
        initial: u64,
        page_log2: Option<u32>,
        limits: &WasmLimits,
    ) -> Result<(), WasmError> {
        self.memories += 1;
        bound("memories", self.memories, 1)?;
        let page = 1u64
            .checked_shl(page_log2.unwrap_or(16))
            .unwrap_or(u64::MAX);
        self.memory_bytes = initial.saturating_mul(page);
        bound(
            "bytes of initial memory",
            self.memory_bytes,
            limits.max_memory as u64,
        )
    }

    /// The bounds on the counts that grow section by section.
    fn check(&self) -> Result<(), WasmError> {
        bound("functions", self.functions, u64::from(WASM_MAX_FUNCTIONS))?;
        bound("globals", self.globals, u64::from(WASM_MAX_GLOBALS))?;
        bound(
            "data segments",
            self.data_segments,
            u64::from(WASM_MAX_DATA_SEGMENTS),
        )
    }
}

/// A reading error or a bound passed, while counting.
enum CensusError {
    Read(wasmparser::BinaryReaderError),
    Over(WasmError),
}

impl CensusError {
    fn into_wasm_error(self) -> WasmError {
        match self {
            CensusError::Read(e) => WasmError::Compile {
                message: e.to_string(),
            },
            CensusError::Over(e) => e,
        }
    }
}

impl From<wasmparser::BinaryReaderError> for CensusError {
    fn from(e: wasmparser::BinaryReaderError) -> Self {
        CensusError::Read(e)
    }
}

impl From<WasmError> for CensusError {
    fn from(e: WasmError) -> Self {
        CensusError::Over(e)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    fn census(wat: &str) -> Result<Census, WasmError> {
        Census::take(&wat::parse_str(wat).unwrap(), &WasmLimits::default())
    }

    #[test]
    fn a_module_is_counted() {
        let c = census(
            r#"(module (memory 2) (table 10 funcref) (global i32 (i32.const 0))
                (func $f) (elem (i32.const 0) func $f $f) (data (i32.const 0) "x"))"#,
        )
        .unwrap();
        assert_eq!(
            (c.tables, c.table_elements, c.memories, c.memory_bytes),
            (1, 10, 1, 2 << 16)
        );
        assert_eq!((c.globals, c.element_segments, c.element_items), (1, 1, 2));
        assert_eq!((c.data_segments, c.functions), (1, 1));
    }

    #[test]
    fn each_bound_is_named() {
        let cases = [
            (
                "(module (table 1000000000 funcref))",
                "elements in one table",
            ),
            (
                "(module (table 1 funcref) (table 1 funcref) (table 1 funcref) (table 1 funcref) (table 1 funcref))",
                "tables",
            ),
            ("(module (memory 2000))", "bytes of initial memory"),
        ];
        for (wat, resource) in cases {
            match census(wat) {
                Err(WasmError::OverLimit { resource: r, .. }) => assert_eq!(r, resource, "{wat}"),
                other => panic!("{wat}: {other:?}"),
            }
        }
        let locals = format!(
            "(module (func (local i32) (local {})))",
            "i64 ".repeat(1000)
        );
        assert!(matches!(
            census(&locals),
            Err(WasmError::OverLimit { resource, found: 1001, .. }) if resource == "locals in one function"
        ));
        let c = census(&format!(
            "(module (func (param i32) (local {})))",
            "i64 ".repeat(1000)
        ))
        .unwrap();
        assert_eq!(c.most_locals, 1000);
        let globals = format!(
            "(module {})",
            "(global i32 (i32.const 0))".repeat(WASM_MAX_GLOBALS as usize + 1)
        );
        assert!(matches!(
            census(&globals),
            Err(WasmError::OverLimit { resource, .. }) if resource == "globals"
        ));
    }
}
