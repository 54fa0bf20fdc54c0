//! Command-line flags in the style of Go's `flag` package, as the upstream
//! sample plugins take them.
//!
//! Accepted forms: `-flag value`, `-flag=value`, `--flag value`,
//! `--flag=value`; boolean flags as `-flag`, `-flag=true` or `-flag=false`.
//! `--` ends the flags; so does the first argument that is not a flag (as
//! Go's `flag.Parse`): it and the rest are ignored (no sample plugin takes
//! any), and the plugin logs a warning naming them.

use std::collections::VecDeque;
use std::path::PathBuf;

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

/// The value part of the flag being parsed, handed to a plugin's own flag
/// handler by [`parse_args`].
#[derive(Debug)]
pub struct FlagValue<'a> {
    name: &'a str,
    inline: Option<String>,
    rest: &'a mut VecDeque<String>,
}

impl FlagValue<'_> {
    /// The flag's value: the text after `=`, else the next argument.
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] when there is no value.
    pub fn string(&mut self) -> Result<String, Error> {
        if let Some(v) = self.inline.take() {
            return Ok(v);
        }
        self.rest.pop_front().ok_or_else(|| Error::Usage {
            message: format!("flag needs an argument: -{}", self.name),
        })
    }

    /// A boolean flag: `true` when given bare, else the value after `=`
    /// (`true`/`false`/`1`/`0`/`t`/`f`, as Go's `strconv.ParseBool`).
    ///
    /// # Errors
    ///
    /// [`Error::Usage`] for any other value.
    pub fn bool(&mut self) -> Result<bool, Error> {
        match self.inline.take() {
            None => Ok(true),
            Some(v) => match v.as_str() {
                "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(true),
                "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(false),
                _ => Err(Error::Usage {
                    message: format!("invalid boolean value {v:?} for -{}", self.name),
                }),
            },
        }
    }
}

/// Parses `args` (without the program name): the common flags into
/// [`CommonArgs`], every other flag through `extra`, which returns
/// `Ok(true)` when it knew the flag.
///
/// # Errors
///
/// [`Error::Help`] for `-h`/`-help`, [`Error::Usage`] for an unknown flag
/// or a missing or bad value.
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
    F: FnMut(&str, &mut FlagValue<'_>) -> Result<bool, Error>,
{
    let mut rest: VecDeque<String> = args.into_iter().collect();
    let mut common = CommonArgs::default();
    while let Some(arg) = rest.pop_front() {
        if arg == "--" {
            common.ignored.extend(rest.drain(..));
            break;
        }
        if arg == "-" || !arg.starts_with('-') {
            common.ignored.push(arg);
            common.ignored.extend(rest.drain(..));
            break;
        }
        let Some(flag) = arg
            .strip_prefix("--")
            .or_else(|| arg.strip_prefix('-'))
            .filter(|f| !f.is_empty() && !f.starts_with('-') && !f.starts_with('='))
        else {
            return Err(Error::Usage {
                message: format!("bad flag syntax: {arg}"),
            });
        };
        let (name, inline) = match flag.split_once('=') {
            Some((n, v)) => (n.to_owned(), Some(v.to_owned())),
            None => (flag.to_owned(), None),
        };
        let mut value = FlagValue {
            name: &name,
            inline,
            rest: &mut rest,
        };
        match name.as_str() {
            "h" | "help" => return Err(Error::Help),
            "name" => common.name = Some(value.string()?),
            "idx" => common.idx = Some(value.string()?),
            "socket-path" | "socket" => common.socket_path = Some(value.string()?.into()),
            "log-level" => {
                let v = value.string()?;
                common.log_level = LogLevel::parse(&v).ok_or_else(|| Error::Usage {
                    message: format!("invalid log level {v:?} (error, warn, info or debug)"),
                })?;
            }
            "verbose" => {
                if value.bool()? {
                    common.log_level = LogLevel::Debug;
                }
            }
            "no-reconnect" => common.no_reconnect = value.bool()?,
            "strict" => common.strict = value.bool()?,
            "log-file" => {
                let v = value.string()?;
                common.log_file = (!v.is_empty()).then(|| v.into());
            }
            "config" => common.config_file = Some(value.string()?.into()),
            _ => {
                if !extra(&name, &mut value)? {
                    return Err(Error::Usage {
                        message: format!("flag provided but not defined: -{name}"),
                    });
                }
            }
        }
    }
    Ok(common)
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
        assert!(matches!(parse(&["-idx"]), Err(Error::Usage { .. })));
        assert!(matches!(parse(&["-bogus"]), Err(Error::Usage { .. })));
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
            Err(Error::Usage { .. })
        ));
        assert!(matches!(
            parse(&["-log-level", "loud"]),
            Err(Error::Usage { .. })
        ));
        assert!(matches!(parse(&["-help"]), Err(Error::Help)));
        assert!(matches!(parse(&["---x"]), Err(Error::Usage { .. })));
        assert!(parse(&["--"]).is_ok());
    }
}
