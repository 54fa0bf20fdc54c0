//! Wire and deployment constants of NRI, each defined once.

use std::time::Duration;

/// Protobuf package of the NRI protocol (`package` of upstream `pkg/api/api.proto`).
pub const PROTO_PACKAGE: &str = "nri.pkg.api.v1alpha1";

/// ttRPC service name of the services a plugin serves (upstream service `Plugin`).
///
/// Used as `Request.service` by the runtime on mux connection
/// [`PLUGIN_SERVICE_CONN`].
pub const PLUGIN_SERVICE: &str = "nri.pkg.api.v1alpha1.Plugin";

/// ttRPC service name of the services a runtime serves (upstream service `Runtime`).
///
/// Used as `Request.service` by the plugin on mux connection
/// [`RUNTIME_SERVICE_CONN`].
pub const RUNTIME_SERVICE: &str = "nri.pkg.api.v1alpha1.Runtime";

/// Service name of the host functions offered to WebAssembly plugins
/// (upstream service `HostFunctions`).
pub const HOST_FUNCTIONS_SERVICE: &str = "nri.pkg.api.v1alpha1.HostFunctions";

/// Multiplexer connection id carrying the [`PLUGIN_SERVICE`] (runtime calls
/// plugin); mirrors upstream `multiplex.PluginServiceConn`.
pub const PLUGIN_SERVICE_CONN: u32 = 1;

/// Multiplexer connection id carrying the [`RUNTIME_SERVICE`] (plugin calls
/// runtime); mirrors upstream `multiplex.RuntimeServiceConn`.
pub const RUNTIME_SERVICE_CONN: u32 = 2;

/// Bare ttRPC method names (`Request.method`), one per RPC of the schema,
/// and each service's list of methods (generated from the schema's
/// services by `cargo xtask codegen`).
pub mod method {
    include!("generated/methods.rs");
}

/// Default path of the runtime's socket for external plugins (upstream
/// `api.DefaultSocketPath`).
pub const DEFAULT_SOCKET_PATH: &str = "/var/run/nri/nri.sock";

/// Default directory of plugins the runtime launches itself (upstream
/// `DefaultPluginPath`).
pub const DEFAULT_PLUGIN_PATH: &str = "/opt/nri/plugins";

/// Default directory of configuration files for launched plugins, named
/// `NN-name.conf` or `name.conf` (upstream `DefaultPluginConfigPath`).
pub const DEFAULT_PLUGIN_CONFIG_PATH: &str = "/etc/nri/conf.d";

/// Environment variable carrying a launched plugin's base name.
pub const ENV_PLUGIN_NAME: &str = "NRI_PLUGIN_NAME";

/// Environment variable carrying a launched plugin's two-digit index.
pub const ENV_PLUGIN_IDX: &str = "NRI_PLUGIN_IDX";

/// Environment variable carrying the file descriptor number of a launched
/// plugin's connection to the runtime (see [`LAUNCHED_PLUGIN_SOCKET_FD`]).
pub const ENV_PLUGIN_SOCKET: &str = "NRI_PLUGIN_SOCKET";

/// File descriptor on which a launched plugin finds its end of the
/// socketpair; the runtime sets [`ENV_PLUGIN_SOCKET`] to this number.
pub const LAUNCHED_PLUGIN_SOCKET_FD: i32 = 3;

/// Default time a runtime waits for a plugin to register (upstream
/// `DefaultPluginRegistrationTimeout`).
pub const DEFAULT_REGISTRATION_TIMEOUT: Duration = Duration::from_secs(5);

/// Default time a runtime waits for a plugin to answer one request (upstream
/// `DefaultPluginRequestTimeout`).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// The NRI protocol version this crate implements, as sent in
/// `RegisterPluginRequest.NRI_version` and `ConfigureRequest.NRI_version`.
///
/// Equal to [`NriVersion::CURRENT`](crate::NriVersion::CURRENT) printed.
pub const NRI_VERSION: &str = "v0.12.5";

/// Build metadata that `nri-runtime` adds to the NRI version it reports in
/// `ConfigureRequest.NRI_version` (`v0.12.5+nri-rs`, see
/// [`nri_rs_runtime_version`](crate::nri_rs_runtime_version)). Go runtimes
/// report their module version (containerd/nri v0.12.x, `pkg/adaptation`)
/// and never this tag; our plugin SDK reads it to know that the runtime is
/// ours ([`is_nri_rs_runtime`](crate::is_nri_rs_runtime)), which decides
/// whether the plugin polls for requests instead of sleeping at once.
/// Semantic versioning ignores build metadata, so every reader of the
/// version still sees v0.12.5.
pub const NRI_RS_BUILD_TAG: &str = "nri-rs";

/// The first eight bytes of a WebAssembly module; the runtime loads such a
/// file in the plugin directory as a WebAssembly plugin instead of executing it.
pub const WASM_MAGIC: [u8; 8] = [0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00];

/// The words by which a runtime built on this crate refuses a request
/// (`UpdateContainers`, status `FAILED_PRECONDITION`) from a plugin
/// instance that a newer instance of the same plugin (same index and name)
/// has taken over from: the status message contains them. Not part of the
/// wire protocol, which has no way to say why an instance gets no more
/// events; the plugin SDK recognises them to give a typed error.
pub const SUPERSEDED_REFUSAL: &str = "superseded by a newer instance of the plugin";

/// ttRPC metadata key (value `"true"`) with which a runtime on
/// `nri-runtime` marks a call about an object it has already committed: a
/// creation that happened while the plugin synchronized, delivered to it
/// after its Synchronize, whose answer cannot refuse it. A plugin that
/// stands for other plugins (`nri-proxy`) reads it (the plugin SDK's
/// `nri_plugin::event_committed`) so as not to refuse, and so lose, an
/// object its runtime keeps. Go plugins ignore it; containerd and CRI-O
/// never send it (a registration waits for their creations in flight).
pub const METADATA_COMMITTED: &str = "nri-rs-committed";
