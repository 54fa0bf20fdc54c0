//! The `wasm:` section of the runtime's configuration file: the
//! [`WasmLimits`] of every WebAssembly plugin.
//!
//! ```yaml
//! wasm:
//!   max-memory: 64MiB        # bytes, or a number with B, KiB, MiB, GiB
//!   max-module-size: 256MiB
//!   fuel-slice: 2000000      # instructions between two deadline checks
//!   max-table-elements: 100000
//!   restart-backoff: 100ms   # first wait before a re-instantiation
//!   max-restart-backoff: 30s
//! ```

use serde::Deserialize;

use super::WasmLimits;
use crate::config_file::ConfigDuration;

/// The section as written; every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub(crate) struct FileWasm {
    max_memory: Option<Size>,
    max_module_size: Option<Size>,
    fuel_slice: Option<u64>,
    max_table_elements: Option<u32>,
    restart_backoff: Option<ConfigDuration>,
    max_restart_backoff: Option<ConfigDuration>,
}

impl FileWasm {
    /// Applies the keys given to `limits`; a zero limit is refused, naming
    /// the key.
    pub(crate) fn apply(self, limits: &mut WasmLimits) -> Result<(), (&'static str, String)> {
        let positive = |key: &'static str, v: u64| {
            if v == 0 {
                Err((key, format!("wasm.{key} must be positive")))
            } else {
                Ok(v)
            }
        };
        if let Some(Size(v)) = self.max_memory {
            let v = positive("max-memory", v)?;
            limits.max_memory = usize::try_from(v).map_err(|_| {
                (
                    "max-memory",
                    format!("wasm.max-memory {v} is too large for this machine"),
                )
            })?;
        }
        if let Some(Size(v)) = self.max_module_size {
            limits.max_module_size = positive("max-module-size", v)?;
        }
        if let Some(v) = self.fuel_slice {
            limits.fuel_slice = positive("fuel-slice", v)?;
        }
        if let Some(v) = self.max_table_elements {
            limits.max_table_elements = positive("max-table-elements", u64::from(v))? as u32;
        }
        let duration = |key: &'static str, d: ConfigDuration| {
            let d = std::time::Duration::from(d);
            if d.is_zero() {
                Err((key, format!("wasm.{key} must be positive")))
            } else {
                Ok(d)
            }
        };
        let first = match self.restart_backoff {
            Some(d) => duration("restart-backoff", d)?,
            None => limits.restart_backoff,
        };
        let max = match self.max_restart_backoff {
            Some(d) => duration("max-restart-backoff", d)?,
            None => limits.max_restart_backoff,
        };
        if max < first {
            return Err((
                "max-restart-backoff",
                "wasm.max-restart-backoff must not be shorter than wasm.restart-backoff".into(),
            ));
        }
        limits.restart_backoff = first;
        limits.max_restart_backoff = max;
        Ok(())
    }
}

const SIZE_EXPECTED: &str =
    "a size in bytes: a number, or a number with a unit (B, KiB, MiB, GiB), e.g. 64MiB";

/// A size in bytes: an integer, or a string with a binary unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Size(u64);

/// Parses `64MiB`, `512 KiB`, `1GiB`, `4096`, `4096B` (units are binary
/// and case-sensitive; `Ki`, `Mi`, `Gi` are accepted for the Kubernetes
/// spelling).
fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (digits, unit) = s.split_at(split);
    let n: u64 = digits.parse().ok()?;
    let mult: u64 = match unit.trim_start() {
        "" | "B" => 1,
        "KiB" | "Ki" => 1 << 10,
        "MiB" | "Mi" => 1 << 20,
        "GiB" | "Gi" => 1 << 30,
        _ => return None,
    };
    n.checked_mul(mult)
}

impl<'de> Deserialize<'de> for Size {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Size;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(SIZE_EXPECTED)
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Size, E> {
                Ok(Size(v))
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Size, E> {
                u64::try_from(v)
                    .map(Size)
                    .map_err(|_| E::invalid_value(serde::de::Unexpected::Signed(v), &self))
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Size, E> {
                parse_size(s)
                    .map(Size)
                    .ok_or_else(|| E::invalid_value(serde::de::Unexpected::Str(s), &self))
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("4096B"), Some(4096));
        assert_eq!(parse_size("512KiB"), Some(512 << 10));
        assert_eq!(parse_size("64 MiB"), Some(64 << 20));
        assert_eq!(parse_size("64Mi"), Some(64 << 20));
        assert_eq!(parse_size("1GiB"), Some(1 << 30));
        for bad in ["", "MiB", "64MB", "64mib", "1.5MiB", "-1", "99999999999GiB"] {
            assert_eq!(parse_size(bad), None, "{bad}");
        }
    }
}
