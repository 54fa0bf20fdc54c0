//! The proxy's configuration: the runtime library's configuration file
//! (for the plugin side) with the proxy's own `proxy:` section.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use nri_runtime::{Config, ConfigDuration, ConfigFormat, ConfigSection};

use crate::Error;

/// Default socket the proxy serves its plugins on.
pub const DEFAULT_PROXY_SOCKET: &str = "/var/run/nri-proxy/nri.sock";
/// Default directory of the plugins the proxy launches.
pub const DEFAULT_PROXY_PLUGIN_DIR: &str = "/opt/nri-proxy/plugins";
/// Default directory of their configuration.
pub const DEFAULT_PROXY_CONFIG_DIR: &str = "/etc/nri-proxy/conf.d";
/// Default [`ProxyConfig::safety_margin`].
pub const DEFAULT_SAFETY_MARGIN: Duration = Duration::from_millis(250);
/// The runtime name the proxy's plugins see in `Configure`.
pub const PROXY_RUNTIME_NAME: &str = "nri-proxy";

/// The `proxy:` section of the file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct Section {
    name: Option<String>,
    index: Option<String>,
    upstream_socket: Option<PathBuf>,
    safety_margin: Option<ConfigDuration>,
    metrics_address: Option<SocketAddr>,
    #[serde(default)]
    fail_request: bool,
}

impl ConfigSection for Section {
    const KEY: &'static str = "proxy";
}

/// Everything the proxy is configured with.
///
/// Read it with [`ProxyConfig::load`] (or [`ProxyConfig::parse`]); the
/// file's top-level keys configure the plugin side exactly as they
/// configure any runtime built on `nri-runtime` (its socket, plugin and
/// configuration directories, timeouts, policies, allowed peers), and the
/// `proxy:` section configures the proxy's own identity upstream.
///
/// ```
/// use nri_proxy::ProxyConfig;
/// use nri_runtime::ConfigFormat;
///
/// let text = "request-timeout: 1s\nplugins:\n  guard: { policy: required }\n\
///             proxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: /run/containerd/nri.sock\n";
/// let c = ProxyConfig::parse("proxy.yaml", ConfigFormat::Yaml, text)?;
/// assert_eq!(c.name.as_deref(), Some("proxy"));
/// assert_eq!(c.runtime.request_timeout, std::time::Duration::from_secs(1));
/// # Ok::<(), nri_proxy::Error>(())
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ProxyConfig {
    /// The plugin side: the runtime library's configuration (runtime name
    /// [`PROXY_RUNTIME_NAME`], socket [`DEFAULT_PROXY_SOCKET`], plugin dir
    /// [`DEFAULT_PROXY_PLUGIN_DIR`], config dir [`DEFAULT_PROXY_CONFIG_DIR`]
    /// unless the file says otherwise).
    pub runtime: Config,
    /// The proxy's NRI name upstream (`proxy.name`; default: from the
    /// environment of a pre-launched plugin or the executable's name).
    pub name: Option<String>,
    /// The proxy's NRI index upstream (`proxy.index`, two digits).
    pub index: Option<String>,
    /// The runtime's NRI socket (`proxy.upstream-socket`, default
    /// `/var/run/nri/nri.sock`); unused when the runtime launched the proxy.
    pub upstream_socket: PathBuf,
    /// How much of the runtime's request timeout the proxy keeps for itself
    /// (`proxy.safety-margin`, default 250 ms, at most a quarter of the
    /// timeout): its plugins share the rest.
    pub safety_margin: Duration,
    /// Where Prometheus metrics are served (`proxy.metrics-address`,
    /// `host:port`; none by default).
    pub metrics_address: Option<SocketAddr>,
    /// Declare `fail_request` upstream (`proxy.fail-request`, default
    /// false): a runtime with plugin-declared failure policies then fails
    /// requests while the proxy does not answer. `keep_connected` is always
    /// declared.
    pub fail_request: bool,
}

impl Default for ProxyConfig {
    fn default() -> Self {
        let mut runtime = Config::new(PROXY_RUNTIME_NAME, env!("CARGO_PKG_VERSION"));
        runtime.socket_path = PathBuf::from(DEFAULT_PROXY_SOCKET);
        runtime.plugin_dir = PathBuf::from(DEFAULT_PROXY_PLUGIN_DIR);
        runtime.config_dir = PathBuf::from(DEFAULT_PROXY_CONFIG_DIR);
        ProxyConfig {
            runtime,
            name: None,
            index: None,
            upstream_socket: PathBuf::from(nri_api::DEFAULT_SOCKET_PATH),
            safety_margin: DEFAULT_SAFETY_MARGIN,
            metrics_address: None,
            fail_request: false,
        }
    }
}

impl ProxyConfig {
    /// Reads the configuration file at `path` (YAML, or TOML for a name
    /// ending in `.toml`) over the defaults.
    ///
    /// # Errors
    ///
    /// [`Error::Config`] naming the file, line and key of the problem;
    /// [`Error::InvalidSetting`] for a bad name or index.
    pub fn load(path: &Path) -> Result<Self, Error> {
        let file = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|e| {
            Error::Config(nri_runtime::Error::ConfigFile {
                file: file.clone(),
                line: None,
                column: None,
                message: format!("cannot read the file: {e}"),
            })
        })?;
        Self::parse(&file, ConfigFormat::of_path(path), &text)
    }

    /// Parses configuration `text`; `file` names it in errors.
    ///
    /// # Errors
    ///
    /// As [`ProxyConfig::load`].
    pub fn parse(file: &str, format: ConfigFormat, text: &str) -> Result<Self, Error> {
        let mut c = ProxyConfig::default();
        let section: Option<Section> = c
            .runtime
            .apply_str_with(file, format, text)
            .map_err(Error::Config)?;
        let s = section.unwrap_or_default();
        let bad = |key, reason: String| Error::InvalidSetting {
            file: file.to_owned(),
            key,
            reason,
        };
        if let Some(name) = &s.name {
            nri_api::check_plugin_name(name).map_err(|e| bad("name", e.to_string()))?;
        }
        if let Some(index) = &s.index {
            nri_api::check_plugin_index(index).map_err(|e| bad("index", e.to_string()))?;
        }
        c.name = s.name;
        c.index = s.index;
        if let Some(p) = s.upstream_socket {
            c.upstream_socket = p;
        }
        if let Some(m) = s.safety_margin {
            c.safety_margin = m.0;
        }
        c.metrics_address = s.metrics_address;
        c.fail_request = s.fail_request;
        Ok(c)
    }

    /// The time the proxy's plugins have for one upstream request whose
    /// timeout is `request_timeout`: the timeout minus the safety margin
    /// (the margin at most a quarter of the timeout).
    ///
    /// ```
    /// use std::time::Duration;
    /// let c = nri_proxy::ProxyConfig::default();
    /// assert_eq!(c.budget(Duration::from_secs(2)), Duration::from_millis(1750));
    /// assert_eq!(c.budget(Duration::from_millis(400)), Duration::from_millis(300));
    /// ```
    pub fn budget(&self, request_timeout: Duration) -> Duration {
        request_timeout.saturating_sub(self.safety_margin.min(request_timeout / 4))
    }

    /// The plugins in the plugin directory that the proxy does not start
    /// because `disable-launch` is true: executables and WebAssembly
    /// modules alike (as in containerd, turning launching off turns off
    /// the plugin directory). Empty when launching is on or the directory
    /// holds none. The proxy logs them as a warning at start, and
    /// `--check` lists them, so that a plugin copied there is not ignored
    /// in silence.
    pub fn plugins_not_launched(&self) -> Vec<PathBuf> {
        let rt = &self.runtime;
        if !rt.disable_launch {
            return Vec::new();
        }
        match nri_runtime::launch::discover(&rt.plugin_dir, &rt.config_dir) {
            Ok(found) => found.into_iter().map(|d| d.path).collect(),
            Err(e) => {
                tracing::debug!(error = %e, "cannot list the plugin directory");
                Vec::new()
            }
        }
    }
}
