//! The command-line flags of containerd/nri's sample plugins, for a plugin
//! program that wants to take them as the Go plugins do: [`GoFlags`].

use std::collections::VecDeque;
use std::path::PathBuf;
use std::process::ExitCode;

use crate::{Builder, Error, Plugin, Runner};

/// The identity and connection flags of the Go sample plugins, parsed in
/// the syntax of Go's `flag` package.
///
/// Flags: `-name NAME`, `-idx NN`, `-socket-path PATH` (alias `-socket`),
/// `-verbose`, `-no-reconnect` (exit when the runtime goes away, as the Go
/// plugins do, instead of reconnecting), `-h`/`-help`. Forms: `-flag
/// value`, `-flag=value`, `--flag value`, `--flag=value`; a boolean flag
/// bare or as `-flag=true`/`-flag=false`. `--` ends the flags, and so does
/// the first argument that is not a flag (as Go's `flag.Parse`); the rest
/// is kept in [`GoFlags::ignored`].
///
/// A plugin's own flags go through the `extra` hook of [`GoFlags::parse`].
///
/// ```no_run
/// use nri_plugin::api::{Container, CreateContainerResponse, PodSandbox};
/// use nri_plugin::{Builder, GoFlags, HandlerResult, Plugin};
///
/// struct Mine {
///     dry_run: bool,
/// }
///
/// #[nri_plugin::plugin]
/// impl Plugin for Mine {
///     async fn create_container(
///         &self,
///         _pod: PodSandbox,
///         _ctr: Container,
///     ) -> HandlerResult<CreateContainerResponse> {
///         Ok(CreateContainerResponse::default())
///     }
/// }
///
/// const USAGE: &str = "usage: mine [flags]\n  -dry-run               change nothing";
///
/// fn main() -> std::process::ExitCode {
///     let mut dry_run = false;
///     let flags = match GoFlags::from_env(|name, value| {
///         match name {
///             "dry-run" => dry_run = value.bool()?,
///             _ => return Ok(false),
///         }
///         Ok(true)
///     }) {
///         Ok(f) => f,
///         Err(e) => return GoFlags::usage_exit(&e, &format!("{USAGE}\n{}", GoFlags::USAGE)),
///     };
///     flags.runner().run(flags.apply(Builder::new(Mine { dry_run })))
/// }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct GoFlags {
    /// `-name`: the plugin name (else the [`Builder::name`] default).
    pub name: Option<String>,
    /// `-idx`: the plugin index (else the [`Builder::index`] default).
    pub index: Option<String>,
    /// `-socket-path` or `-socket`: the runtime's socket for an external
    /// plugin.
    pub socket_path: Option<PathBuf>,
    /// `-verbose`: the plugin should log more (the program decides what
    /// that means; the SDK only logs through `tracing`).
    pub verbose: bool,
    /// `-no-reconnect`: an external plugin ends when it loses the runtime.
    pub no_reconnect: bool,
    /// The arguments after the flags (none of the Go sample plugins takes
    /// any; Go ignores them).
    pub ignored: Vec<String>,
}

/// The value of the flag being parsed, handed to the `extra` hook of
/// [`GoFlags::parse`].
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
        self.rest
            .pop_front()
            .ok_or_else(|| Error::usage(format!("flag needs an argument: -{}", self.name)))
    }

    /// A boolean flag: `true` when given bare, else the value after `=`
    /// (`1`, `t`, `T`, `true`, `TRUE`, `True` or the same for false, as Go's
    /// `strconv.ParseBool`).
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
                _ => Err(Error::usage(format!(
                    "invalid boolean value {v:?} for -{}",
                    self.name
                ))),
            },
        }
    }
}

impl GoFlags {
    /// Usage lines of the flags [`GoFlags`] knows, for a `-help` text.
    pub const USAGE: &'static str = "\
  -idx NN                plugin index to register to NRI
  -name NAME             plugin name to register to NRI
  -socket-path PATH      path of the NRI socket file (alias: -socket)
  -verbose               enable (more) verbose logging
  -no-reconnect          exit when the runtime goes away instead of reconnecting
  -help                  this text";

    /// Parses `args` (without the program name). Every flag is first
    /// offered to `extra`, which returns `Ok(true)` when it took the flag
    /// (reading its value from the [`FlagValue`]); the flags `extra` does
    /// not take are the ones listed on [`GoFlags`].
    ///
    /// # Errors
    ///
    /// [`Error::HelpRequested`] for `-h`/`-help`; [`Error::Usage`] for an
    /// unknown flag, a missing or bad value, or what `extra` returns.
    pub fn parse<I, F>(args: I, mut extra: F) -> Result<GoFlags, Error>
    where
        I: IntoIterator<Item = String>,
        F: FnMut(&str, &mut FlagValue<'_>) -> Result<bool, Error>,
    {
        let mut rest: VecDeque<String> = args.into_iter().collect();
        let mut flags = GoFlags::default();
        while let Some(arg) = rest.pop_front() {
            if arg == "--" {
                flags.ignored.extend(rest.drain(..));
                break;
            }
            if arg == "-" || !arg.starts_with('-') {
                flags.ignored.push(arg);
                flags.ignored.extend(rest.drain(..));
                break;
            }
            let Some(flag) = arg
                .strip_prefix("--")
                .or_else(|| arg.strip_prefix('-'))
                .filter(|f| !f.is_empty() && !f.starts_with('-') && !f.starts_with('='))
            else {
                return Err(Error::usage(format!("bad flag syntax: {arg}")));
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
            if extra(&name, &mut value)? {
                continue;
            }
            match name.as_str() {
                "h" | "help" => return Err(Error::HelpRequested),
                "name" => flags.name = Some(value.string()?),
                "idx" => flags.index = Some(value.string()?),
                "socket-path" | "socket" => flags.socket_path = Some(value.string()?.into()),
                "verbose" => flags.verbose = value.bool()?,
                "no-reconnect" => flags.no_reconnect = value.bool()?,
                _ => {
                    return Err(Error::usage(format!(
                        "flag provided but not defined: -{name}"
                    )));
                }
            }
        }
        Ok(flags)
    }

    /// [`GoFlags::parse`] of the process's arguments.
    ///
    /// # Errors
    ///
    /// As [`GoFlags::parse`].
    pub fn from_env<F>(extra: F) -> Result<GoFlags, Error>
    where
        F: FnMut(&str, &mut FlagValue<'_>) -> Result<bool, Error>,
    {
        GoFlags::parse(std::env::args().skip(1), extra)
    }

    /// Sets the name, index and socket given on the command line on
    /// `builder`, and logs a warning naming the [ignored](GoFlags::ignored)
    /// arguments.
    pub fn apply<P: Plugin>(&self, builder: Builder<P>) -> Builder<P> {
        let mut b = builder;
        if let Some(n) = &self.name {
            b = b.name(n.clone());
        }
        if let Some(i) = &self.index {
            b = b.index(i.clone());
        }
        if let Some(s) = &self.socket_path {
            b = b.socket_path(s.clone());
        }
        if !self.ignored.is_empty() {
            tracing::warn!(arguments = ?self.ignored, "ignoring arguments after the flags");
        }
        b
    }

    /// A [`Runner`] that reconnects an external plugin unless
    /// `-no-reconnect` was given.
    pub fn runner(&self) -> Runner {
        if self.no_reconnect {
            Runner::new().reconnect(None)
        } else {
            Runner::new()
        }
    }

    /// The exit status for a failed [`GoFlags::parse`], as Go's `flag`
    /// package: for `-help` prints `usage` to stdout and returns 0;
    /// otherwise prints the error and `usage` to stderr and returns 2.
    pub fn usage_exit(error: &Error, usage: &str) -> ExitCode {
        use std::io::Write;
        if matches!(error, Error::HelpRequested) {
            let _ = writeln!(std::io::stdout(), "{usage}");
            ExitCode::SUCCESS
        } else {
            let _ = writeln!(std::io::stderr(), "{error}\n{usage}");
            ExitCode::from(2)
        }
    }
}
