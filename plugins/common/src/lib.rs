//! Shared pieces of the NRI sample plugins (`plugins/*`):
//!
//! - [`parse_args`]: the flags of the upstream Go samples (`-idx`, `-name`,
//!   `-socket-path`/`-socket`, `-verbose`, plus `-log-level` and
//!   `-no-reconnect`) in Go's `flag` syntax, and a hook for a plugin's own
//!   flags;
//! - [`init_logging`]: `tracing` to stderr or a (switchable) log file;
//! - [`CommonArgs::builder`] and [`CommonArgs::runner`]: the plugin's
//!   builder from the flags and [`nri_plugin::Runner`], the SDK's run loop
//!   (reconnect when external, SIGINT/SIGTERM, exit status);
//! - [`decode_yaml`]: YAML with the Go samples' decoding rules
//!   (`sigs.k8s.io/yaml`: case-insensitive keys, unknown keys ignored);
//! - [`container_annotation`]: the annotation lookup order of the samples;
//! - [`goyaml`]: YAML decoded exactly as the Go plugins decode it, and
//!   [`Strict`]/[`Source`]: what Go drops silently is warned about, or
//!   refused in strict mode;
//! - [`fence`]: the allow-lists operators put around the injecting
//!   plugins (pod namespaces, and per plugin the values it may inject);
//! - `testing` (feature): drive the Go runtime peer in integration tests;
//!   `parity` (feature `testing`): compare a plugin with the Go plugin's
//!   golden outcome of its `nri sim` scenario.

use std::path::PathBuf;

mod args;
mod dump;
pub mod fence;
pub mod goyaml;
mod lenient;
mod logging;
#[cfg(feature = "testing")]
pub mod parity;
#[cfg(feature = "testing")]
pub mod testing;
mod yaml;

pub use args::{COMMON_USAGE, CommonArgs, LogLevel, parse_args};
pub use dump::{dump, erased::Dump, to_yaml};
pub use lenient::{
    AnnotationError, Drops, MAX_LISTED, MAX_LISTING_BYTES, MAX_LOG_BYTES_PER_ANNOTATION, Source,
    Strict, StrictError, decode_annotation, listing, strict_key,
};
pub use logging::{LogOutput, LogWriter, init_logging};
pub use nri_plugin::FlagValue;
pub use yaml::{DecodeError, decode_yaml, fold_keys, parse_yaml};

/// Errors of this crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A bad command line, or `-h`/`-help` ([`nri_plugin::GoFlags::parse`]).
    #[error(transparent)]
    Flags(#[from] nri_plugin::Error),
    /// The `-config` file cannot be read.
    #[error("cannot read configuration file {}", path.display())]
    ConfigFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The log file cannot be opened.
    #[error("cannot open log file {}", path.display())]
    LogFile {
        /// The file.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}

/// Handles the outcome of [`parse_args`] in a `main`: on `-help` prints
/// `usage` to stdout and returns exit status 0, on a usage error prints the
/// error and `usage` to stderr and returns 2 (Go's `flag` behaviour).
pub fn usage_exit(err: &Error, usage: &str) -> std::process::ExitCode {
    use std::io::Write;
    match err {
        Error::Flags(e) => nri_plugin::GoFlags::usage_exit(e, usage),
        e => {
            let _ = writeln!(std::io::stderr(), "{e}\n{usage}");
            std::process::ExitCode::from(2)
        }
    }
}

/// Looks up the annotation of a container the way the upstream samples
/// do: for each prefix in order (current key first, then its deprecated
/// form; an empty prefix is skipped), `<prefix>/container.<ctr>`; then,
/// if `pod_scope`, `<prefix>/pod`, then the bare `<prefix>`. Returns the
/// key found and its value.
///
/// ```
/// use std::collections::BTreeMap;
/// use nri_sample_common::container_annotation;
///
/// let a = BTreeMap::from([
///     ("devices.nri.io/container.c0".to_string(), "old".to_string()),
///     ("devices.noderesource.dev/pod".to_string(), "pod".to_string()),
/// ]);
/// let p = ["devices.noderesource.dev", "devices.nri.io"];
/// assert_eq!(container_annotation(&a, &p, "c0", true).map(|(_, v)| v), Some("old"));
/// assert_eq!(container_annotation(&a, &p, "c1", true).map(|(_, v)| v), Some("pod"));
/// assert_eq!(container_annotation(&a, &p, "c1", false), None);
/// ```
pub fn container_annotation<'a>(
    annotations: &'a std::collections::BTreeMap<String, String>,
    prefixes: &[&str],
    container: &str,
    pod_scope: bool,
) -> Option<(String, &'a str)> {
    let mut keys: Vec<String> = prefixes
        .iter()
        .filter(|p| !p.is_empty())
        .map(|p| format!("{p}/container.{container}"))
        .collect();
    if pod_scope {
        keys.extend(
            prefixes
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| format!("{p}/pod")),
        );
        keys.extend(
            prefixes
                .iter()
                .filter(|p| !p.is_empty())
                .map(|p| (*p).to_owned()),
        );
    }
    keys.into_iter()
        .find_map(|k| annotations.get(&k).map(|v| (k, v.as_str())))
}
