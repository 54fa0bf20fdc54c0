//! Terminal output of `nri sim`: colour only when asked (a TTY without
//! NO_COLOR), progress notes on stderr when it is a terminal.

use std::io::Write;

use nri_sim::Record;
use nri_sim::report::{Call, EventResult, Summary};
use nri_sim::spec::{DiffLine, show};

#[derive(Clone, Copy)]
enum Style {
    Bold,
    Dim,
    Green,
    Red,
    Yellow,
    Cyan,
}

pub struct Human<W: Write + Send> {
    out: W,
    color: bool,
    progress: bool,
    quiet: bool,
    full_spec: bool,
    in_specs: bool,
    in_expect: bool,
    progress_shown: bool,
}

impl<W: Write + Send> Human<W> {
    pub fn new(out: W, color: bool, progress: bool) -> Self {
        Human {
            out,
            color,
            progress,
            quiet: false,
            full_spec: false,
            in_specs: false,
            in_expect: false,
            progress_shown: false,
        }
    }

    pub fn quiet(mut self, q: bool) -> Self {
        self.quiet = q;
        self
    }

    pub fn full_spec(mut self, f: bool) -> Self {
        self.full_spec = f;
        self
    }

    fn paint(&self, style: Style, s: &str) -> String {
        if !self.color {
            return s.to_owned();
        }
        let code = match style {
            Style::Bold => "1",
            Style::Dim => "2",
            Style::Green => "32",
            Style::Red => "31",
            Style::Yellow => "33",
            Style::Cyan => "36",
        };
        format!("\x1b[{code}m{s}\x1b[0m")
    }

    fn line(&mut self, s: &str) {
        self.clear_progress();
        let _ = writeln!(self.out, "{s}");
    }

    fn clear_progress(&mut self) {
        if self.progress_shown {
            let _ = write!(std::io::stderr(), "\r\x1b[2K");
            self.progress_shown = false;
        }
    }

    fn calls_line(&self, calls: &[Call], show_op: bool) -> String {
        calls
            .iter()
            .map(|c| {
                let t = c.ms.map(|m| format!(" {m:.1}ms")).unwrap_or_default();
                let op = if show_op {
                    format!(" {}", c.operation)
                } else {
                    String::new()
                };
                let text = format!("{}{op}{t}", c.plugin);
                match c.result.as_str() {
                    "ok" | "" => text,
                    other => self.paint(Style::Red, &format!("{text} {}", other.replace('_', " "))),
                }
            })
            .collect::<Vec<_>>()
            .join(", ")
    }

    fn event(&mut self, e: &EventResult) {
        let status = if e.ok {
            self.paint(Style::Green, "ok")
        } else {
            self.paint(Style::Red, "FAILED")
        };
        let head = format!(
            "  {:<22} {:<18} {status} {}",
            e.event,
            e.target,
            self.paint(Style::Dim, &format!("{:.1}ms", e.ms))
        );
        self.line(&head);
        if let Some(err) = &e.error {
            let l = format!("      {}", self.paint(Style::Red, err));
            self.line(&l);
        }
        if !e.calls.is_empty() {
            let l = format!(
                "      {} {}",
                self.paint(Style::Dim, "calls:"),
                self.calls_line(&e.calls, false)
            );
            self.line(&l);
        }
        if !e.changes.is_empty() {
            let mut by: Vec<(String, Vec<String>)> = Vec::new();
            for c in &e.changes {
                let what = if c.key.is_empty() {
                    c.field.clone()
                } else {
                    format!("{} {}", c.field, c.key)
                };
                let what = if c.removed { format!("-{what}") } else { what };
                match by.iter_mut().find(|(p, _)| *p == c.plugin) {
                    Some((_, v)) => v.push(what),
                    None => by.push((c.plugin.clone(), vec![what])),
                }
            }
            for (p, v) in by {
                let l = format!(
                    "      {} {} {}",
                    self.paint(Style::Cyan, "changed"),
                    p,
                    v.join(", ")
                );
                self.line(&l);
            }
        }
        for u in &e.updates {
            let l = format!(
                "      {} {} {}",
                self.paint(Style::Cyan, "update"),
                u.container,
                u.resources
            );
            self.line(&l);
        }
        for v in &e.evictions {
            let l = format!(
                "      {} {} ({})",
                self.paint(Style::Yellow, "evict"),
                v.container,
                v.reason
            );
            self.line(&l);
        }
        for f in &e.plugin_failures {
            let l = format!(
                "      {} {} {}: {} {}",
                self.paint(Style::Yellow, "!"),
                f.plugin,
                f.class.replace('_', " "),
                f.message,
                self.paint(Style::Dim, "(reported, request goes on)")
            );
            self.line(&l);
        }
    }

    fn diff(&mut self, d: &DiffLine) {
        let (sign, style, text) = match d {
            DiffLine::Added { path, value } => ("+", Style::Green, entry(path, &show(value))),
            DiffLine::Removed { path, value } => ("-", Style::Red, entry(path, &show(value))),
            DiffLine::Changed { path, old, new } => (
                "~",
                Style::Yellow,
                format!("{path}: {} -> {}", show(old), show(new)),
            ),
        };
        let l = format!("    {}", self.paint(style, &format!("{sign} {text}")));
        self.line(&l);
    }

    fn summary(&mut self, s: &Summary) {
        let exp = if s.expectations_failed == 0 {
            self.paint(
                Style::Green,
                &format!("{} expectations held", s.expectations_held),
            )
        } else {
            self.paint(
                Style::Red,
                &format!(
                    "{} of {} expectations FAILED",
                    s.expectations_failed,
                    s.expectations_failed + s.expectations_held
                ),
            )
        };
        let problems = if s.unexpected_plugin_problems == 0 {
            format!("{} plugin problems", s.plugin_problems)
        } else {
            self.paint(
                Style::Red,
                &format!(
                    "{} plugin problems ({} UNEXPECTED)",
                    s.plugin_problems, s.unexpected_plugin_problems
                ),
            )
        };
        let l = format!(
            "\n{} {} steps, {} events ({} refused), {} plugin failures reported, {} conflicts, {problems}; {exp}; {:.2}s",
            self.paint(Style::Bold, "summary:"),
            s.steps,
            s.events,
            s.failed_events,
            s.plugin_failures,
            s.conflicts,
            s.ms / 1000.0
        );
        self.line(&l);
    }
}

/// `process.env[A=1]` with value `A=1` reads better as `process.env: A=1`.
fn entry(path: &str, value: &str) -> String {
    match path.strip_suffix(&format!("[{value}]")) {
        Some(base) => format!("{base}: {value}"),
        None => format!("{path}: {value}"),
    }
}

impl<W: Write + Send> nri_sim::Reporter for Human<W> {
    #[allow(clippy::too_many_lines)]
    fn report(&mut self, r: &Record) {
        let verbose = !self.quiet;
        match r {
            Record::Start {
                scenario,
                description,
                file,
                ..
            } => {
                let l = format!(
                    "{} {} {}",
                    self.paint(Style::Bold, "nri sim:"),
                    self.paint(Style::Bold, scenario),
                    self.paint(Style::Dim, &format!("({file})"))
                );
                self.line(&l);
                if verbose {
                    for d in description.lines() {
                        let l = format!("  {}", self.paint(Style::Dim, d));
                        self.line(&l);
                    }
                }
            }
            Record::PluginStarted { .. } => {}
            Record::PluginRegistered {
                plugin,
                events,
                ms,
                calls,
                synced,
            } if verbose => {
                let ev = if events.len() >= 13 {
                    "all events".to_owned()
                } else {
                    events.join(",")
                };
                let l = format!(
                    "{} {plugin:<14} registered in {ms:.0}ms, events: {}",
                    self.paint(Style::Green, "plugin"),
                    self.paint(Style::Dim, &ev)
                );
                self.line(&l);
                let sync: Vec<&Call> = calls
                    .iter()
                    .filter(|c| c.operation == "Synchronize")
                    .collect();
                if let (Some(c), Some((p, n))) = (sync.first(), synced)
                    && p + n > 0
                {
                    let l = format!(
                        "       Synchronize with {p} pods and {n} containers answered in {:.1}ms",
                        c.ms.unwrap_or_default()
                    );
                    self.line(&l);
                }
            }
            Record::PluginFailed {
                plugin,
                reason,
                output,
            } => {
                let l = format!(
                    "{} {plugin}: {reason}",
                    self.paint(Style::Red, "plugin FAILED")
                );
                self.line(&l);
                for o in output {
                    let l = format!("       | {}", self.paint(Style::Dim, o));
                    self.line(&l);
                }
            }
            Record::PluginExited {
                plugin,
                status,
                expected,
                output,
            } => {
                if *expected {
                    if verbose && !status.contains("exit status: 0") {
                        let l = format!(
                            "{} {plugin} ended: {status}",
                            self.paint(Style::Dim, "plugin")
                        );
                        self.line(&l);
                    }
                } else {
                    let l = format!(
                        "{} {plugin} exited on its own: {status}",
                        self.paint(Style::Red, "plugin CRASHED")
                    );
                    self.line(&l);
                    for o in output.iter().rev().take(3).rev() {
                        let l = format!("       | {}", self.paint(Style::Dim, o));
                        self.line(&l);
                    }
                }
            }
            Record::PluginOutput { plugin, line } => {
                let l = format!(
                    "       {} {}",
                    self.paint(Style::Dim, &format!("[{plugin}]")),
                    line
                );
                self.line(&l);
            }
            Record::Sync { pods, containers } if verbose && pods + containers > 0 => {
                let l = format!(
                    "       runtime listed {pods} pods and {containers} containers for Synchronize"
                );
                self.line(&l);
            }
            Record::Calls { calls } if verbose => {
                let l = format!(
                    "  {} {}",
                    self.paint(Style::Dim, "calls outside steps:"),
                    self.calls_line(calls, true)
                );
                self.line(&l);
            }
            Record::Unsolicited { updates, evictions } if verbose => {
                for u in updates {
                    let l = format!(
                        "  {} update of {} {}",
                        self.paint(Style::Cyan, "unsolicited"),
                        u.container,
                        u.resources
                    );
                    self.line(&l);
                }
                for e in evictions {
                    let l = format!(
                        "  {} eviction of {} ({})",
                        self.paint(Style::Yellow, "unsolicited"),
                        e.container,
                        e.reason
                    );
                    self.line(&l);
                }
            }
            Record::Step {
                index,
                label,
                action,
                target,
            } if verbose => {
                let label = label
                    .as_ref()
                    .map(|l| format!(" [{l}]"))
                    .unwrap_or_default();
                let l = format!(
                    "{} {}",
                    self.paint(Style::Bold, &format!("step {index}: {action} {target}")),
                    self.paint(Style::Dim, &label)
                );
                self.line(&l);
            }
            Record::Event(e) if verbose => self.event(e),
            Record::StepEnd { calls, .. } if verbose && !calls.is_empty() => {
                let l = format!(
                    "  {} {}",
                    self.paint(Style::Dim, "calls of the group:"),
                    self.calls_line(calls, true)
                );
                self.line(&l);
            }
            Record::Spec {
                container,
                diff,
                spec,
            } if verbose => {
                if !self.in_specs {
                    self.in_specs = true;
                    let l = format!(
                        "\n{}",
                        self.paint(
                            Style::Bold,
                            "final OCI specs (diff against the spec built from the scenario: plugin adjustments and updates)"
                        )
                    );
                    self.line(&l);
                }
                let l = format!("  {}", self.paint(Style::Bold, container));
                self.line(&l);
                if diff.is_empty() {
                    self.line("    (unchanged)");
                }
                for d in diff {
                    self.diff(d);
                }
                if self.full_spec {
                    let text = serde_json::to_string_pretty(spec).unwrap_or_default();
                    for t in text.lines() {
                        self.line(&format!("    {t}"));
                    }
                }
            }
            Record::Expectation {
                at,
                step: Some(_),
                what,
                held,
                detail,
            } => {
                let l = if *held {
                    format!("  {} {what}", self.paint(Style::Green, "expectation held:"))
                } else {
                    format!(
                        "  {} {what}: {detail} {}",
                        self.paint(Style::Red, "expectation FAILED:"),
                        self.paint(Style::Dim, &format!("({at})"))
                    )
                };
                self.line(&l);
            }
            Record::Expectation {
                at,
                step: None,
                what,
                held,
                detail,
            } => {
                if !self.in_expect {
                    self.in_expect = true;
                    let l = format!("\n{}", self.paint(Style::Bold, "expectations"));
                    self.line(&l);
                }
                let l = if *held {
                    format!("  {} {what}", self.paint(Style::Green, "held  "))
                } else {
                    format!(
                        "  {} {what}: {detail} {}",
                        self.paint(Style::Red, "FAILED"),
                        self.paint(Style::Dim, &format!("({at})"))
                    )
                };
                self.line(&l);
            }
            Record::Summary(s) => self.summary(s),
            _ => {}
        }
        let _ = self.out.flush();
    }

    fn progress(&mut self, message: &str) {
        if !self.progress {
            return;
        }
        let mut err = std::io::stderr();
        if message.is_empty() {
            self.clear_progress();
        } else {
            let _ = write!(err, "\r\x1b[2K… {message}");
            let _ = err.flush();
            self.progress_shown = true;
        }
    }
}
