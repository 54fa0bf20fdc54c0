//! `nri sim`: replay a scenario against plugins in an embedded runtime.

use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use nri_runtime::FailurePolicy;
use nri_sim::{ExtraPlugin, Options, Record, Reporter, Scenario};

use crate::{EXIT_FAILED, EXIT_OK, EXIT_USAGE};

const AFTER_HELP: &str = "\
Examples:
  nri sim
      Run the built-in demo with the bundled plugins (adjusters, a conflict,
      a hanging plugin, a crash, a late registration).
  nri sim scenario.yaml
      Replay a scenario file (format: docs/sim/format.md).
  nri sim --plugin ./target/debug/my-plugin:15
      Run your plugin (index 15) through the built-in `lifecycle` scenario.
  nri sim scenario.yaml --plugin ./my-plugin --no-bundled --json > run.jsonl
      Only your plugin, machine-readable output (one JSON object per line).
  nri sim --plugin-dir /opt/nri/plugins --policy my-plugin=required scenario.yaml
      Launch NN-name executables from a directory, as containerd does
      (WebAssembly modules there are loaded into the runtime).
  nri sim --plugin ./my-plugin.wasm:20
      Load a WebAssembly plugin (built with GOOS=wasip1 GOARCH=wasm
      -buildmode=c-shared) into the embedded runtime.
  nri sim --config /etc/nri/runtime.yaml scenario.yaml
      Run with the runtime configuration file an nri-runtime based runtime
      loads (failure policies, timeouts, validation settings).
  nri sim --print-scenario demo > my.yaml
      Start a scenario of your own from a built-in one.
  nri sim parity.yaml --plugin-path device-injector=./device-injector --outcome
      Print what happened (registrations, each step and event ok or not,
      final specs) without timings, to compare runs of different builds.

Exit status: 0 every expectation held and every plugin started and
registered (or the scenario expected it not to), 1 an expectation failed or
a plugin could not start, exited before registering, failed Configure or
crashed, 2 usage error (a --plugin that is not an executable, a
--plugin-dir without plugins), invalid scenario, or the simulation could
not run.";

/// Arguments of `nri sim`.
#[derive(Debug, clap::Args)]
#[command(after_help = AFTER_HELP)]
pub struct Args {
    /// Scenario file (YAML; `-` reads stdin). Default: the built-in `demo`,
    /// or `lifecycle` when plugins are given with --plugin/--plugin-dir.
    scenario: Option<PathBuf>,
    /// Run a built-in scenario instead of a file (`demo`, `lifecycle`).
    #[arg(long, value_name = "NAME", conflicts_with = "scenario")]
    builtin: Option<String>,
    /// Start a plugin executable, or load a WebAssembly plugin (a `.wasm`
    /// module) into the runtime (repeatable). The index comes from `:IDX`,
    /// else from a file name `NN-name`, else 50.
    #[arg(long = "plugin", value_name = "PATH[:IDX]")]
    plugins: Vec<String>,
    /// Launch the `NN-name` executables of a directory, with their
    /// `NN-name.conf` configuration from the same directory.
    #[arg(long, value_name = "DIR")]
    plugin_dir: Option<PathBuf>,
    /// Do not start the scenario's bundled plugins.
    #[arg(long)]
    no_bundled: bool,
    /// Failure policy of a plugin by name: ignore, fail or required (repeatable).
    #[arg(long = "policy", value_name = "NAME=POLICY")]
    policies: Vec<String>,
    /// The runtime's configuration file (YAML, or TOML for `.toml`; the
    /// format of docs/runtime/config.md): policies, timeouts, strike limit,
    /// validation settings. The scenario's `runtime` settings and --policy
    /// override it.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The executable of a scenario plugin by name, replacing its `path`
    /// (repeatable).
    #[arg(long = "plugin-path", value_name = "NAME=PATH")]
    plugin_paths: Vec<String>,
    /// Machine-readable output: one JSON object per line.
    #[arg(long, conflicts_with_all = ["outcome", "golden"])]
    json: bool,
    /// Print only the outcome (JSON, no timings): plugins and their events,
    /// each step's and event's success, final specs.
    #[arg(long, conflicts_with = "golden")]
    outcome: bool,
    /// Print the outcome as a golden file recording SOURCE (what the
    /// plugins were built from) and this command.
    #[arg(long, value_name = "SOURCE")]
    golden: Option<String>,
    /// Show every line the plugins write, however they were started (also
    /// those launched from --plugin-dir or with `launch: true`, and
    /// WebAssembly plugins: their log calls and what they write to
    /// stdout/stderr).
    #[arg(long)]
    plugin_output: bool,
    /// Print the full final OCI spec of each container, not just the diff.
    #[arg(long)]
    full_spec: bool,
    /// Only print expectations and the summary.
    #[arg(short, long)]
    quiet: bool,
    /// Check the scenario and exit.
    #[arg(long)]
    check: bool,
    /// Print a built-in scenario and exit.
    #[arg(long, value_name = "NAME", num_args = 0..=1, default_missing_value = "demo")]
    print_scenario: Option<String>,
    /// List the bundled plugins and exit.
    #[arg(long)]
    list_bundled: bool,
}

fn builtin(name: &str) -> Option<&'static str> {
    nri_sim::BUILTIN_SCENARIOS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, t)| *t)
}

fn usage(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("nri sim: error: {msg}");
    ExitCode::from(EXIT_USAGE)
}

fn load(args: &Args, extra: &[ExtraPlugin]) -> Result<Scenario, nri_sim::Error> {
    let (file, dir, text) = match (&args.scenario, &args.builtin) {
        (Some(p), _) if p.as_os_str() == "-" => {
            let mut s = String::new();
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut s).map_err(|e| {
                nri_sim::Error::Io {
                    context: "reading the scenario from stdin".into(),
                    source: e,
                }
            })?;
            ("<stdin>".to_owned(), PathBuf::from("."), s)
        }
        (Some(p), _) => {
            let text = std::fs::read_to_string(p).map_err(|e| nri_sim::Error::Io {
                context: format!("reading {}", p.display()),
                source: e,
            })?;
            let dir = p
                .parent()
                .filter(|d| !d.as_os_str().is_empty())
                .map(Path::to_path_buf)
                .unwrap_or_else(|| PathBuf::from("."));
            (p.display().to_string(), dir, text)
        }
        (None, name) => {
            let name = name.clone().unwrap_or_else(|| {
                if args.plugins.is_empty() && args.plugin_dir.is_none() {
                    "demo".into()
                } else {
                    "lifecycle".into()
                }
            });
            let text = builtin(&name).ok_or_else(|| nri_sim::Error::Invalid {
                at: nri_sim::Position {
                    file: "--builtin".into(),
                    line: 0,
                    column: 0,
                },
                message: format!("no built-in scenario {name:?} (try demo or lifecycle)"),
            })?;
            (
                format!("<built-in {name}>"),
                PathBuf::from("."),
                text.to_owned(),
            )
        }
    };
    // Names in the scenario may refer to the plugins of the command line.
    let opts = nri_sim::scenario::ParseOptions::default()
        .extra_plugins(extra.iter().map(|x| format!("{}-{}", x.index, x.name)))
        .plugin_dir(args.plugin_dir.is_some());
    Scenario::parse_with(&file, &dir, &text, &opts)
}

/// Checks that `path` is an executable file (or a WebAssembly module,
/// which the runtime loads itself): a `--plugin` that cannot start is a
/// usage error, found before anything runs.
fn executable(path: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    let shown = path.display();
    match std::fs::metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(format!("{shown}: no such file")),
        Err(e) => Err(format!("{shown}: {e}")),
        Ok(m) if !m.is_file() => Err(format!("{shown}: not a file")),
        Ok(m) if m.permissions().mode() & 0o111 == 0 && !nri_runtime::launch::is_wasm(path) => {
            Err(format!("{shown}: not executable"))
        }
        Ok(_) => Ok(()),
    }
}

/// Writes JSON lines.
struct Json<W: Write + Send>(W);

impl<W: Write + Send> Reporter for Json<W> {
    fn report(&mut self, record: &Record) {
        if let Ok(line) = serde_json::to_string(record) {
            let _ = writeln!(self.0, "{line}");
        }
    }
}

/// Prints an outcome, or a golden file with its source and this command.
fn print_outcome(outcome: nri_sim::Outcome, golden: Option<String>) {
    let text = match golden {
        None => serde_json::to_string_pretty(&outcome),
        Some(source) => {
            let argv: Vec<String> = std::env::args()
                .skip(1)
                .map(|a| {
                    if a.is_empty()
                        || a.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c))
                    {
                        format!("'{}'", a.replace('\'', r"'\''"))
                    } else {
                        a
                    }
                })
                .collect();
            serde_json::to_string_pretty(&nri_sim::Golden {
                source,
                command: format!("nri {}", argv.join(" ")),
                outcome,
            })
        }
    };
    match text {
        Ok(t) => println!("{t}"),
        Err(e) => eprintln!("nri sim: cannot print the outcome: {e}"),
    }
}

impl Args {
    /// `--plugin-output`: every plugin's output is shown.
    pub fn plugin_output(&self) -> bool {
        self.plugin_output
    }
}

/// Runs `nri sim`; `plugin_log` collects WebAssembly plugins' output (for
/// `--plugin-output`).
pub fn run(args: Args, plugin_log: Option<nri_sim::PluginLog>) -> ExitCode {
    if let Some(code) = print_only(&args) {
        return code;
    }
    let extra = match extra_plugins(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let policies = match policies(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    if let Some(path) = &args.config {
        // Refused at start-up, before anything runs (also with --check).
        if let Err(e) = nri_runtime::Config::new("nri-sim", "").apply_file(path) {
            return usage(e);
        }
    }
    let scenario = match load_or_show(&args, &extra) {
        Ok(s) => s,
        Err(code) => return code,
    };
    if args.check {
        println!(
            "{}: ok ({} plugins, {} pods, {} steps, {} expectations)",
            scenario.file,
            scenario.plugins.len(),
            scenario.pods.len(),
            scenario.steps.len(),
            scenario.expect.len()
        );
        return ExitCode::from(EXIT_OK);
    }
    let plugin_paths = match plugin_paths(&args) {
        Ok(x) => x,
        Err(code) => return code,
    };
    let opts = Options {
        self_exe: std::env::current_exe().ok(),
        extra_plugins: extra,
        plugin_dir: args.plugin_dir.clone(),
        no_bundled: args.no_bundled,
        policies,
        plugin_output: args.plugin_output,
        plugin_log,
        config_file: args.config.clone(),
        plugin_paths,
    };
    execute(&args, &scenario, &opts)
}

/// `--list-bundled` and `--print-scenario`: print and exit.
fn print_only(args: &Args) -> Option<ExitCode> {
    if args.list_bundled {
        for (name, what) in nri_sim::bundled::Kind::describe() {
            println!("{name:<8} {what}");
        }
        return Some(ExitCode::from(EXIT_OK));
    }
    let name = args.print_scenario.as_ref()?;
    Some(match builtin(name) {
        Some(t) => {
            print!("{t}");
            ExitCode::from(EXIT_OK)
        }
        None => usage(format!(
            "no built-in scenario {name:?} (try demo or lifecycle)"
        )),
    })
}

/// `--plugin`, checked (each an executable).
fn extra_plugins(args: &Args) -> Result<Vec<ExtraPlugin>, ExitCode> {
    let mut extra = Vec::new();
    for p in &args.plugins {
        let parsed = ExtraPlugin::parse(p).map_err(|e| e.to_string());
        match parsed.and_then(|x| executable(&x.path).map(|()| x)) {
            Ok(x) => extra.push(x),
            Err(e) => return Err(usage(format!("--plugin {e}"))),
        }
    }
    Ok(extra)
}

/// `--policy NAME=POLICY`, checked.
fn policies(args: &Args) -> Result<Vec<(String, FailurePolicy)>, ExitCode> {
    let mut policies = Vec::new();
    for p in &args.policies {
        let parsed = p
            .split_once('=')
            .and_then(|(n, v)| nri_sim::scenario::parse_policy(v).map(|v| (n.to_owned(), v)));
        match parsed {
            Some(x) => policies.push(x),
            None => {
                return Err(usage(format!(
                    "--policy {p:?}: expected NAME=POLICY with POLICY ignore, fail or required"
                )));
            }
        }
    }
    Ok(policies)
}

/// The scenario, or its error shown with the snippet it points at.
fn load_or_show(args: &Args, extra: &[ExtraPlugin]) -> Result<Scenario, ExitCode> {
    load(args, extra).map_err(|e| {
        let code = usage(&e);
        if let (Some(at), Some(path)) = (e.position(), &args.scenario)
            && let Ok(text) = std::fs::read_to_string(path)
            && let Some(snip) = Scenario::snippet(&text, at.line, at.column)
        {
            eprintln!("{snip}");
        }
        code
    })
}

/// `--plugin-path NAME=PATH`, checked.
fn plugin_paths(args: &Args) -> Result<BTreeMap<String, PathBuf>, ExitCode> {
    let mut plugin_paths = BTreeMap::new();
    for p in &args.plugin_paths {
        match p.split_once('=') {
            Some((n, path)) if !n.is_empty() && !path.is_empty() => {
                plugin_paths.insert(n.to_owned(), PathBuf::from(path));
            }
            _ => return Err(usage(format!("--plugin-path {p:?}: expected NAME=PATH"))),
        }
    }
    Ok(plugin_paths)
}

/// Runs the scenario with the reporter the options ask for: JSON lines,
/// the outcome (or its golden comparison), or the human report.
fn execute(args: &Args, scenario: &Scenario, opts: &Options) -> ExitCode {
    let rt = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return usage(format!("cannot start the async runtime: {e}")),
    };
    let stdout = std::io::stdout();
    let result = if args.json {
        let mut rep = Json(std::io::stdout());
        rt.block_on(nri_sim::run(scenario, opts, &mut rep))
    } else if args.outcome || args.golden.is_some() {
        let mut rep = nri_sim::Collect::default();
        let r = rt.block_on(nri_sim::run(scenario, opts, &mut rep));
        if r.is_ok() {
            print_outcome(nri_sim::Outcome::from_records(&rep.0), args.golden.clone());
        }
        r
    } else {
        let color =
            stdout.is_terminal() && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
        let progress = std::io::stderr().is_terminal();
        let mut rep = crate::human::Human::new(std::io::stdout(), color, progress)
            .quiet(args.quiet)
            .full_spec(args.full_spec);
        rt.block_on(nri_sim::run(scenario, opts, &mut rep))
    };
    match result {
        Ok(s) if s.passed() => ExitCode::from(EXIT_OK),
        Ok(_) => ExitCode::from(EXIT_FAILED),
        Err(e) => usage(e),
    }
}
