//! [`PluginProcess`]: an externally started plugin and its log.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Child;

use anyhow::{Result, anyhow, bail};

use crate::logs::{event_blocks, events_in_log, is_subsequence, poll, strip_ansi};
use crate::timeout;

/// An external plugin process; killed (and reaped) on `Drop`.
pub struct PluginProcess {
    pub(crate) name: String,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
}

impl PluginProcess {
    /// Its log file (stdout and stderr).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// Its log so far, ANSI codes removed.
    pub fn log(&self) -> String {
        fs::read(&self.log)
            .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
            .unwrap_or_default()
    }

    /// Waits until its log has a line containing all of `needles`; returns
    /// that line. Fails early if the plugin exits.
    pub fn wait_for(&mut self, needles: &[&str]) -> Result<String> {
        let what = format!("plugin {} to log a line with {needles:?}", self.name);
        let log = self.log.clone();
        let name = self.name.clone();
        let child = &mut self.child;
        poll(&what, timeout(), || {
            let text = fs::read(&log)
                .map(|b| strip_ansi(&String::from_utf8_lossy(&b)))
                .unwrap_or_default();
            if let Some(l) = text.lines().find(|l| needles.iter().all(|n| l.contains(n))) {
                return Ok(Some(l.to_owned()));
            }
            if let Some(st) = child.try_wait()? {
                bail!("plugin {name} exited ({st}) while waiting for {needles:?}:\n{text}");
            }
            Ok(None)
        })
    }

    /// Waits until the events logged on lines containing `marker` include
    /// `want` as a subsequence; returns all of them.
    pub fn wait_events(&mut self, marker: &str, want: &[&str]) -> Result<Vec<String>> {
        let what = format!("plugin {} to log events {want:?} for {marker}", self.name);
        let r = poll(&what, timeout(), || {
            let got = events_in_log(&self.log(), marker);
            Ok(is_subsequence(want, &got).then_some(got))
        });
        r.map_err(|e| anyhow!("{e}; events seen: {:?}", events_in_log(&self.log(), marker)))
    }

    /// Waits until the event blocks of the whole log (see [`event_blocks`])
    /// include `want` as a subsequence; returns all of them. For plugins
    /// that print each event over several lines, all prefixed with the event
    /// name.
    pub fn wait_event_blocks(&mut self, want: &[&str]) -> Result<Vec<String>> {
        let what = format!("plugin {} to log events {want:?}", self.name);
        let r = poll(&what, timeout(), || {
            let got = event_blocks(&self.log());
            Ok(is_subsequence(want, &got).then_some(got))
        });
        r.map_err(|e| anyhow!("{e}; events seen: {:?}", event_blocks(&self.log())))
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Waits until it exits; returns its exit status.
    pub fn wait_exit(&mut self) -> Result<std::process::ExitStatus> {
        let what = format!("plugin {} to exit", self.name);
        let child = &mut self.child;
        poll(&what, timeout(), || Ok(child.try_wait()?))
    }
}

impl Drop for PluginProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
