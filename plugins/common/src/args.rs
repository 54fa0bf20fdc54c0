//! The sample plugins' command line: the Go samples' flags
//! ([`nri_plugin::GoFlags`], Go's `flag` syntax) and the flags every Rust
//! sample adds (`-log-level`, `-strict`, `-log-file`, `-config`).

use std::path::PathBuf;

use nri_plugin::{Builder, FlagValue, GoFlags, Plugin, Runner};

use crate::Error;

/// How much to log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum LogLevel {
    /// Errors only.
    Error,
    /// Warnings and errors.
    Warn,
    /// Informational messages (the default, as upstream's logrus).
    #[default]
    Info,
    /// Everything useful for debugging (`-verbose`).
    Debug,
}

impl LogLevel {
    /// Parses `error`, `warn`/`warning`, `info` or `debug` (any case).
    pub fn parse(s: &str) -> Option<LogLevel> {
        match s.to_ascii_lowercase().as_str() {
            "error" => Some(LogLevel::Error),
            "warn" | "warning" => Some(LogLevel::Warn),
            "info" => Some(LogLevel::Info),
            "debug" | "trace" => Some(LogLevel::Debug),
            _ => None,
        }
    }
}

/// The flags every sample plugin takes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommonArgs {
    /// `-name`: plugin name to register (default: `NRI_PLUGIN_NAME`, else
    /// from the executable's file name).
    pub name: Option<String>,
    /// `-idx`: two-digit plugin index (default: `NRI_PLUGIN_IDX`, else from
    /// the executable's file name).
    pub idx: Option<String>,
    /// `-socket-path` or `-socket`: the runtime's NRI socket for an external
    /// plugin (default `/var/run/nri/nri.sock`).
    pub socket_path: Option<PathBuf>,
    /// `-log-level` (`-verbose` is `debug`).
    pub log_level: LogLevel,
    /// `-no-reconnect`: exit when the connection to the runtime is lost, as
    /// the Go samples do, instead of reconnecting.
    pub no_reconnect: bool,
    /// `-strict`: refuse input the Go plugin drops silently (unknown keys,
    /// duplicate keys, unknown names) instead of warning and dropping it.
    pub strict: bool,
    /// `-log-file`: log to this file (appending) instead of stderr.
    pub log_file: Option<PathBuf>,
    /// `-config`: the plugin's configuration (as the runtime would pass it
    /// in Configure), used when the runtime passes none (external plugins).
    pub config_file: Option<PathBuf>,
    /// Arguments after the flags (ignored, as Go ignores them).
    pub ignored: Vec<String>,
}

impl CommonArgs {
    /// The text of `-config`, or empty without one.
    ///
    /// # Errors
    ///
    /// The file cannot be read.
    pub fn config_text(&self) -> Result<String, Error> {
        match &self.config_file {
            None => Ok(String::new()),
            Some(p) => std::fs::read_to_string(p).map_err(|source| Error::ConfigFile {
                path: p.clone(),
                source,
            }),
        }
    }

    /// A builder for `plugin` with the identity and socket of the flags;
    /// `default_name` when no name is given anywhere (a sample started by
    /// hand as `logger -idx 10`): not by `-name`, `NRI_PLUGIN_NAME` or the
    /// executable's file name.
    pub fn builder<P: Plugin>(&self, plugin: P, default_name: &str) -> Builder<P> {
        let mut b = self.go_flags().apply(Builder::new(plugin));
        if self.name.is_none() && default_name_needed() {
            b = b.name(default_name);
        }
        b
    }

    /// The run loop: [`Runner`] reconnecting external plugins unless
    /// `-no-reconnect`.
    pub fn runner(&self) -> Runner {
        self.go_flags().runner()
    }

    fn go_flags(&self) -> GoFlags {
        let mut f = GoFlags::default();
        f.name.clone_from(&self.name);
        f.index.clone_from(&self.idx);
        f.socket_path.clone_from(&self.socket_path);
        f.no_reconnect = self.no_reconnect;
        f.ignored.clone_from(&self.ignored);
        f
    }

    /// The runtime's configuration `runtime`, or the `-config` text `own`
    /// when the runtime passed none.
    pub fn effective_config<'a>(runtime: &'a str, own: &'a str) -> &'a str {
        if runtime.trim().is_empty() {
            own
        } else {
            runtime
        }
    }
}

/// Usage lines of the common flags, for a plugin's `-help` text.
pub const COMMON_USAGE: &str = "\
  -idx NN                plugin index to register to NRI
  -name NAME             plugin name to register to NRI
  -socket-path PATH      path of the NRI socket file (alias: -socket)
  -log-level LEVEL       error, warn, info (default) or debug
  -verbose               same as -log-level debug
  -no-reconnect          exit when the runtime goes away instead of reconnecting
  -strict                refuse input the Go plugin would drop silently (default: warn and drop)
  -log-file PATH         log to this file instead of stderr
  -config FILE           configuration used when the runtime passes none (external plugins)
  -help                  this text";

/// Parses `args` (without the program name): the common flags into
/// [`CommonArgs`], every other flag through `extra`, which returns
/// `Ok(true)` when it knew the flag.
///
/// # Errors
///
/// [`Error::Flags`] with [`nri_plugin::Error::HelpRequested`] for
/// `-h`/`-help`, with [`nri_plugin::Error::Usage`] for an unknown flag or a
/// missing or bad value.
///
/// ```
/// use nri_sample_common::{parse_args, LogLevel};
///
/// let mut verbose_dump = false;
/// let args = ["-idx", "10", "--socket-path=/tmp/nri.sock", "-verbose", "-dump"];
/// let common = parse_args(args.iter().map(|s| s.to_string()), |name, value| {
///     match name {
///         "dump" => verbose_dump = value.bool()?,
///         _ => return Ok(false),
///     }
///     Ok(true)
/// })?;
/// assert_eq!(common.idx.as_deref(), Some("10"));
/// assert_eq!(common.log_level, LogLevel::Debug);
/// assert!(verbose_dump);
/// # Ok::<(), nri_sample_common::Error>(())
/// ```
pub fn parse_args<I, F>(args: I, mut extra: F) -> Result<CommonArgs, Error>
where
    I: IntoIterator<Item = String>,
    F: FnMut(&str, &mut FlagValue<'_>) -> Result<bool, nri_plugin::Error>,
{
    let mut log_level = LogLevel::default();
    let mut strict = false;
    let mut log_file = None;
    let mut config_file = None;
    let flags = GoFlags::parse(args, |name, value| {
        match name {
            "log-level" => {
                let v = value.string()?;
                log_level = LogLevel::parse(&v).ok_or_else(|| {
                    nri_plugin::Error::usage(format!(
                        "invalid log level {v:?} (error, warn, info or debug)"
                    ))
                })?;
            }
            "verbose" => {
                if value.bool()? {
                    log_level = LogLevel::Debug;
                }
            }
            "strict" => strict = value.bool()?,
            "log-file" => {
                let v = value.string()?;
                log_file = (!v.is_empty()).then(|| v.into());
            }
            "config" => config_file = Some(value.string()?.into()),
            _ => return extra(name, value),
        }
        Ok(true)
    })?;
    Ok(CommonArgs {
        name: flags.name,
        idx: flags.index,
        socket_path: flags.socket_path,
        log_level,
        no_reconnect: flags.no_reconnect,
        strict,
        log_file,
        config_file,
        ignored: flags.ignored,
    })
}

/// Whether neither `NRI_PLUGIN_NAME` nor the executable's file name gives
/// the plugin a name.
fn default_name_needed() -> bool {
    if std::env::var_os(nri_api::ENV_PLUGIN_NAME).is_some_and(|v| !v.is_empty()) {
        return false;
    }
    let exe = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|f| f.to_string_lossy().into_owned()))
        .unwrap_or_default();
    // `NN-name` gives the name; a bare executable name does too, but only
    // together with an index from elsewhere (the SDK's rule).
    nri_api::parse_plugin_file_name(&exe).is_err() && nri_api::check_plugin_name(&exe).is_err()
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn parse(args: &[&str]) -> Result<CommonArgs, Error> {
        parse_args(args.iter().map(|s| s.to_string()), |_, _| Ok(false))
    }

    #[test]
    fn go_forms() {
        let a = parse(&[
            "-idx=05",
            "--name",
            "x",
            "-socket",
            "/s",
            "-log-level",
            "WARN",
        ])
        .unwrap();
        assert_eq!(a.idx.as_deref(), Some("05"));
        assert_eq!(a.name.as_deref(), Some("x"));
        assert_eq!(a.socket_path, Some(PathBuf::from("/s")));
        assert_eq!(a.log_level, LogLevel::Warn);
        let a = parse(&["-verbose=false", "-no-reconnect"]).unwrap();
        assert_eq!(a.log_level, LogLevel::Info);
        assert!(a.no_reconnect);
        assert!(!a.strict);
        assert!(parse(&["--strict"]).unwrap().strict);
    }

    #[test]
    fn errors() {
        assert!(matches!(
            parse(&["-idx"]),
            Err(Error::Flags(nri_plugin::Error::Usage { .. }))
        ));
        assert!(matches!(
            parse(&["-bogus"]),
            Err(Error::Flags(nri_plugin::Error::Usage { .. }))
        ));
        assert_eq!(
            parse(&["-idx", "1", "pos", "-verbose"]).unwrap(),
            CommonArgs {
                idx: Some("1".into()),
                ignored: vec!["pos".into(), "-verbose".into()],
                ..Default::default()
            }
        );
        assert_eq!(parse(&["--", "-x"]).unwrap().ignored, ["-x"]);
        assert!(matches!(
            parse(&["-verbose=maybe"]),
            Err(Error::Flags(nri_plugin::Error::Usage { .. }))
        ));
        assert!(matches!(
            parse(&["-log-level", "loud"]),
            Err(Error::Flags(nri_plugin::Error::Usage { .. }))
        ));
        assert!(matches!(
            parse(&["-help"]),
            Err(Error::Flags(nri_plugin::Error::HelpRequested))
        ));
        assert!(matches!(
            parse(&["---x"]),
            Err(Error::Flags(nri_plugin::Error::Usage { .. }))
        ));
        assert!(parse(&["--"]).is_ok());
    }
}
