//! Logging: `tracing` to stderr, or to a file that can be switched while the
//! plugin runs (the logger's `logFile` from a runtime configuration).
//!
//! Colours (ANSI escape sequences) only when the output is stderr and
//! stderr is a terminal (and `NO_COLOR` is not set), as Go's logrus text
//! formatter does; never in a file: lines written to a file have any
//! escape sequence removed, so switching from a terminal to a file while
//! running leaves no colour codes in the file either.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use tracing::Level;
use tracing_subscriber::fmt::MakeWriter;

use crate::{Error, LogLevel};

#[derive(Debug)]
enum Output {
    Stderr,
    File { path: PathBuf, file: File },
}

/// Where log lines go. Cloneable; [`LogOutput::set_file`] switches every
/// clone.
#[derive(Debug, Clone)]
pub struct LogOutput {
    inner: Arc<Mutex<Output>>,
}

impl LogOutput {
    fn stderr() -> Self {
        LogOutput {
            inner: Arc::new(Mutex::new(Output::Stderr)),
        }
    }

    /// Appends log lines to `path` (created with mode 0644 if missing) from
    /// now on. Does nothing if that file is already the output.
    ///
    /// # Errors
    ///
    /// [`Error::LogFile`] if the file cannot be opened; the output is then
    /// unchanged.
    pub fn set_file(&self, path: &Path) -> Result<(), Error> {
        let mut out = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if matches!(&*out, Output::File { path: p, .. } if p == path) {
            return Ok(());
        }
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .open(path)
            .map_err(|source| Error::LogFile {
                path: path.to_owned(),
                source,
            })?;
        *out = Output::File {
            path: path.to_owned(),
            file,
        };
        Ok(())
    }

    /// The current log file, if logging to a file.
    pub fn file(&self) -> Option<PathBuf> {
        match &*self.inner.lock().unwrap_or_else(PoisonError::into_inner) {
            Output::Stderr => None,
            Output::File { path, .. } => Some(path.clone()),
        }
    }
}

/// One write to the current output.
#[derive(Debug)]
pub struct LogWriter {
    inner: Arc<Mutex<Output>>,
}

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf).map(|()| buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut *self.inner.lock().unwrap_or_else(PoisonError::into_inner) {
            Output::Stderr => io::stderr().write_all(buf),
            Output::File { file, .. } => file.write_all(&strip_ansi(buf)),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogOutput {
    type Writer = LogWriter;
    fn make_writer(&'a self) -> LogWriter {
        LogWriter {
            inner: self.inner.clone(),
        }
    }
}

/// Removes ANSI escape sequences (`ESC [ ... final-byte` and two-byte
/// `ESC x`) from `buf`. Borrowed when there is none.
fn strip_ansi(buf: &[u8]) -> std::borrow::Cow<'_, [u8]> {
    const ESC: u8 = 0x1b;
    if !buf.contains(&ESC) {
        return std::borrow::Cow::Borrowed(buf);
    }
    let mut out = Vec::with_capacity(buf.len());
    let mut i = 0;
    while i < buf.len() {
        if buf[i] != ESC {
            out.push(buf[i]);
            i += 1;
            continue;
        }
        i += 1;
        match buf.get(i) {
            // CSI: parameters and intermediates up to a final byte 0x40..=0x7e.
            Some(b'[') => {
                i += 1;
                while i < buf.len() && !(0x40..=0x7e).contains(&buf[i]) {
                    i += 1;
                }
                i += 1;
            }
            Some(_) => i += 1,
            None => {}
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Whether log lines to stderr get colours: stderr is a terminal and
/// `NO_COLOR` is unset or empty.
fn colour_on_stderr() -> bool {
    use std::io::IsTerminal;
    io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
}

/// Installs the global `tracing` subscriber (one line per event) writing to
/// stderr, or to `file` when given. Colours only on a terminal, never in a
/// file (see the module docs). Returns the handle to switch the output
/// later. Call once, at start.
///
/// # Errors
///
/// [`Error::LogFile`] if `file` cannot be opened.
pub fn init_logging(level: LogLevel, file: Option<&Path>) -> Result<LogOutput, Error> {
    let output = LogOutput::stderr();
    if let Some(f) = file {
        output.set_file(f)?;
    }
    let level = match level {
        LogLevel::Error => Level::ERROR,
        LogLevel::Warn => Level::WARN,
        LogLevel::Info => Level::INFO,
        LogLevel::Debug => Level::DEBUG,
    };
    // Fails only if a subscriber is already installed (tests); keep that one.
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(output.clone())
        .with_ansi(file.is_none() && colour_on_stderr())
        .with_target(false)
        .try_init();
    Ok(output)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn strip_removes_escape_sequences_only() {
        let coloured = b"\x1b[2m2026-01-01T00:00:00Z\x1b[0m \x1b[32m INFO\x1b[0m started\n";
        assert_eq!(
            &*strip_ansi(coloured),
            b"2026-01-01T00:00:00Z  INFO started\n"
        );
        assert!(matches!(
            strip_ansi(b"plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(&*strip_ansi(b"a\x1b"), b"a");
        assert_eq!(&*strip_ansi(b"a\x1b[1;3"), b"a");
        assert_eq!(&*strip_ansi(b"\x1b(Bx"), b"Bx");
    }

    #[test]
    fn file_output_has_no_colour() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log");
        let out = LogOutput::stderr();
        out.set_file(&path).unwrap();
        let mut w = out.make_writer();
        w.write_all(b"\x1b[31mERROR\x1b[0m boom\n").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"ERROR boom\n");
    }
}
