//! Logging: `tracing` to stderr, or to a file that can be switched while the
//! plugin runs (the logger's `logFile` from a runtime configuration).

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
        match &mut *self.inner.lock().unwrap_or_else(PoisonError::into_inner) {
            Output::Stderr => io::stderr().write(buf),
            Output::File { file, .. } => file.write(buf),
        }
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match &mut *self.inner.lock().unwrap_or_else(PoisonError::into_inner) {
            Output::Stderr => io::stderr().write_all(buf),
            Output::File { file, .. } => file.write_all(buf),
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

/// Installs the global `tracing` subscriber (plain text, no colours, one
/// line per event) writing to stderr, or to `file` when given. Returns the
/// handle to switch the output later. Call once, at start.
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
        .with_target(false)
        .try_init();
    Ok(output)
}
