//! The output of WebAssembly plugins. They run inside the embedded
//! runtime, which logs what they write (standard output and error, and
//! their log calls) as `tracing` events on the target
//! [`PLUGIN_LOG_TARGET`] with the plugin's `NN-name` in the field
//! `plugin`. [`PluginLog::layer`] collects those events; a [`PluginLog`]
//! given in [`Options::plugin_log`](crate::Options::plugin_log) lets
//! `--plugin-output` show them like the output of any other plugin.
//!
//! ```
//! use tracing_subscriber::layer::SubscriberExt as _;
//!
//! let log = nri_sim::PluginLog::default();
//! let subscriber = tracing_subscriber::registry().with(log.layer());
//! tracing::subscriber::with_default(subscriber, || {
//!     tracing::info!(target: "nri::plugin", plugin = "30-guest", "hello");
//! });
//! assert_eq!(log.drain(), [("30-guest".to_owned(), "INFO hello".to_owned())]);
//! ```

use std::collections::VecDeque;
use std::fmt;
use std::sync::{Arc, Mutex};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::filter::{Filtered, Targets};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};

/// The `tracing` target the runtime logs WebAssembly plugins' output on.
pub const PLUGIN_LOG_TARGET: &str = "nri::plugin";

/// Most lines kept between two [`PluginLog::drain`] calls; older ones are
/// dropped (and counted) so that a chatty plugin cannot grow memory.
pub const MAX_LINES: usize = 10_000;

/// Lines collected from WebAssembly plugins, shared by the
/// [`PluginLog::layer`] that fills it and the simulator that reads it.
#[derive(Debug, Clone, Default)]
pub struct PluginLog {
    inner: Arc<Mutex<Lines>>,
}

#[derive(Debug, Default)]
struct Lines {
    lines: VecDeque<(String, String)>,
    dropped: u64,
}

impl PluginLog {
    /// A `tracing` layer that records every event of the target
    /// [`PLUGIN_LOG_TARGET`] (at any level, whatever the other layers
    /// filter) into this log.
    pub fn layer<S>(&self) -> Filtered<PluginLogLayer, Targets, S>
    where
        S: Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    {
        let filter = Targets::new().with_target(PLUGIN_LOG_TARGET, Level::TRACE);
        PluginLogLayer { log: self.clone() }.with_filter(filter)
    }

    /// The lines collected since the last call, as (plugin id, line).
    pub fn drain(&self) -> Vec<(String, String)> {
        let mut l = self.lock();
        l.lines.drain(..).collect()
    }

    /// How many lines were dropped because [`MAX_LINES`] were waiting.
    pub fn dropped(&self) -> u64 {
        self.lock().dropped
    }

    fn push(&self, plugin: String, line: String) {
        let mut l = self.lock();
        if l.lines.len() == MAX_LINES {
            l.lines.pop_front();
            l.dropped += 1;
        }
        l.lines.push_back((plugin, line));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Lines> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The layer of [`PluginLog::layer`].
#[derive(Debug)]
pub struct PluginLogLayer {
    log: PluginLog,
}

/// The fields of one plugin output event.
#[derive(Default)]
struct Fields {
    plugin: Option<String>,
    stream: Option<String>,
    message: String,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        match field.name() {
            "plugin" => self.plugin = Some(value.to_owned()),
            "stream" => self.stream = Some(value.to_owned()),
            "message" => self.message = value.to_owned(),
            _ => {}
        }
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        match field.name() {
            "plugin" => self.plugin = Some(format!("{value:?}")),
            "stream" => self.stream = Some(format!("{value:?}")),
            "message" => self.message = format!("{value:?}"),
            _ => {}
        }
    }
}

impl<S: Subscriber> Layer<S> for PluginLogLayer {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut f = Fields::default();
        event.record(&mut f);
        let Some(plugin) = f.plugin else {
            return;
        };
        if f.stream.is_some() {
            // What the plugin wrote to stdout/stderr, line by line.
            for line in f.message.lines() {
                self.log.push(plugin.clone(), line.to_owned());
            }
        } else {
            // A log call: its level, as the plugin's own logger would show.
            let level = event.metadata().level();
            self.log.push(plugin, format!("{level} {}", f.message));
        }
    }
}

/// A subscriber with only the layer of `log` (for tests and embedders
/// that have no subscriber of their own).
pub fn subscriber(log: &PluginLog) -> impl Subscriber + Send + Sync {
    tracing_subscriber::registry().with(log.layer())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn log_calls_and_written_lines_are_collected_per_plugin() {
        let log = PluginLog::default();
        tracing::subscriber::with_default(subscriber(&log), || {
            tracing::warn!(target: "nri::plugin", plugin = "10-a", "careful");
            tracing::debug!(target: "nri::plugin", plugin = %"20-b", stream = "stdout", "one\ntwo");
            tracing::info!(target: "nri_runtime", plugin = "10-a", "not plugin output");
            tracing::info!(target: "nri::plugin", "no plugin field");
        });
        assert_eq!(
            log.drain(),
            [
                ("10-a".to_owned(), "WARN careful".to_owned()),
                ("20-b".to_owned(), "one".to_owned()),
                ("20-b".to_owned(), "two".to_owned()),
            ]
        );
        assert!(log.drain().is_empty(), "each line is drained once");
    }

    #[test]
    fn lines_beyond_the_cap_drop_the_oldest() {
        let log = PluginLog::default();
        for i in 0..MAX_LINES + 3 {
            log.push("p".into(), i.to_string());
        }
        assert_eq!(log.dropped(), 3);
        let lines = log.drain();
        assert_eq!(lines.len(), MAX_LINES);
        assert_eq!(lines[0].1, "3");
    }
}
