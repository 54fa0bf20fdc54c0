//! The error type of this crate.

use std::net::SocketAddr;

/// Errors of the proxy: configuration, start-up and the end of a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The configuration file is invalid (the runtime library's error names
    /// the file, the line and the key).
    #[error("configuration: {0}")]
    Config(#[source] nri_runtime::Error),
    /// A value of the `proxy:` section is invalid.
    #[error("configuration {file}: proxy.{key}: {reason}")]
    InvalidSetting {
        /// The configuration file.
        file: String,
        /// The key under `proxy:`.
        key: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The plugin side (the runtime library serving the proxy's plugins)
    /// could not be built or started.
    #[error("plugin side: {0}")]
    Runtime(#[source] nri_runtime::Error),
    /// The upstream connection (the proxy as a plugin of the runtime)
    /// could not be set up, or ended for good.
    #[error("upstream: {0}")]
    Upstream(#[source] nri_plugin::Error),
    /// The process could not be set up (the async runtime, signal
    /// handlers).
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The metrics address cannot be served.
    #[error("metrics address {address}: {source}")]
    Metrics {
        /// The configured address.
        address: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
}
