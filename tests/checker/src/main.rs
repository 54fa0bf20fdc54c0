//! `nri-checker`: runs seeds of the fault-schedule checker, replays a
//! failure.
//!
//! ```text
//! nri-checker run --seeds 500 --mode both          # seeds 0..500, both modes
//! nri-checker run --time 3600 --start 100000       # for an hour from seed 100000
//! nri-checker replay --seed 42 --mode proxy        # one seed again (and shrink it)
//! nri-checker replay --file nri-checker-failures/seed-42-proxy.txt
//! ```

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use nri_checker::shrink::Budget;
use nri_checker::totals::Totals;
use nri_checker::{Mode, Options, Outcome, Size, check_schedule, check_seed};

#[derive(Parser)]
#[command(
    name = "nri-checker",
    about = "Seeded fault-schedule checker of nri-runtime and nri-proxy"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Modes {
    Runtime,
    Proxy,
    Both,
}

impl Modes {
    fn list(self) -> Vec<Mode> {
        match self {
            Modes::Runtime => vec![Mode::Runtime],
            Modes::Proxy => vec![Mode::Proxy],
            Modes::Both => vec![Mode::Runtime, Mode::Proxy],
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs seeds `start..start+seeds` (or until `--time` runs out).
    Run {
        /// Number of seeds (per mode).
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Stop after this many seconds (then `--seeds` is no limit).
        #[arg(long)]
        time: Option<u64>,
        /// Where the plugins sit.
        #[arg(long, value_enum, default_value = "both")]
        mode: Modes,
        /// Fewest steps of a schedule.
        #[arg(long, default_value_t = 20)]
        min_steps: usize,
        /// Most steps of a schedule.
        #[arg(long, default_value_t = 90)]
        max_steps: usize,
        /// Do not shrink failures.
        #[arg(long)]
        no_shrink: bool,
        /// Where failing schedules are written.
        #[arg(long, default_value = "nri-checker-failures")]
        out: PathBuf,
    },
    /// Runs seeds without shrinking and prints, per failing seed, the kinds
    /// of violation, marked against the regression list (`seeds.txt`):
    /// `new` (not listed), `open`, `FIXED?` (listed as fixed, fails again);
    /// and the open entries that pass now.
    Triage {
        /// Number of seeds (per mode).
        #[arg(long, default_value_t = 100)]
        seeds: u64,
        /// First seed.
        #[arg(long, default_value_t = 0)]
        start: u64,
        /// Where the plugins sit.
        #[arg(long, value_enum, default_value = "both")]
        mode: Modes,
    },
    /// Runs one seed, or a schedule file, again (and shrinks a failure).
    Replay {
        /// The seed.
        #[arg(long, conflicts_with = "file")]
        seed: Option<u64>,
        /// A schedule file written by a failure.
        #[arg(long)]
        file: Option<PathBuf>,
        /// The mode of `--seed`.
        #[arg(long, value_enum, default_value = "runtime")]
        mode: Modes,
        /// The generator version of `--seed` (default: the latest).
        #[arg(long)]
        generator: Option<u32>,
        /// Print the schedule before running it.
        #[arg(long)]
        print: bool,
        /// Print what every plugin saw and every request (no shrinking).
        #[arg(long)]
        dump: bool,
        /// Do not shrink a failure.
        #[arg(long)]
        no_shrink: bool,
        /// Where a failing schedule is written.
        #[arg(long, default_value = "nri-checker-failures")]
        out: PathBuf,
    },
}

fn main() -> ExitCode {
    use tracing_subscriber::Layer as _;
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("off"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_filter(filter);
    tracing_subscriber::registry()
        .with(fmt)
        .with(nri_checker::wasm::layer())
        .init();
    match run(Cli::parse()) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("nri-checker: {e:#}");
            ExitCode::from(2)
        }
    }
}

/// Whether every seed passed.
fn run(cli: Cli) -> anyhow::Result<bool> {
    match cli.cmd {
        Cmd::Run {
            seeds,
            start,
            time,
            mode,
            min_steps,
            max_steps,
            no_shrink,
            out,
        } => {
            let size = Size {
                min_steps,
                max_steps: max_steps.max(min_steps),
            };
            let limit = time.map(Duration::from_secs);
            Ok(run_many(
                start,
                seeds,
                limit,
                &mode.list(),
                size,
                !no_shrink,
                &out,
            ))
        }
        Cmd::Triage { seeds, start, mode } => triage(start, seeds, &mode.list()),
        Cmd::Replay {
            seed,
            file,
            mode,
            generator,
            print,
            dump,
            no_shrink,
            out,
        } => {
            let budget = (!no_shrink && !dump).then(Budget::default);
            let opts = Options {
                dump,
                ..Options::default()
            };
            let outcome = match (seed, file) {
                (_, Some(f)) => {
                    let text = std::fs::read_to_string(&f)
                        .with_context(|| format!("reading {}", f.display()))?;
                    let s = nri_checker::text::parse(&text)?;
                    if print {
                        print!("{s}");
                    }
                    check_schedule(&s, &opts, budget)
                }
                (Some(seed), None) => {
                    let m = mode.list()[0];
                    let g = generator.unwrap_or(nri_checker::generate::GENERATOR);
                    let s = nri_checker::generate::schedule_with(seed, m, Size::default(), g);
                    if print {
                        print!("{s}");
                    }
                    check_schedule(&s, &opts, budget)
                }
                (None, None) => anyhow::bail!("replay needs --seed or --file"),
            };
            Ok(report(&outcome, &out))
        }
    }
}

/// Prints one outcome; whether it passed.
fn report(outcome: &Outcome, out: &std::path::Path) -> bool {
    if let Outcome::Pass(r) | Outcome::Fail(_, r) = outcome {
        print!("{}", r.dump);
    }
    match outcome {
        Outcome::Pass(r) => {
            println!(
                "pass: {} requests, {} events to plugins, {} connections, {} split syncs, {:?} paused time",
                r.requests, r.events, r.instances, r.split_syncs, r.paused
            );
            true
        }
        Outcome::Fail(f, _) => {
            let file = f.write(out).ok();
            print!("{}", f.describe(file.as_deref()));
            false
        }
        Outcome::SetupError(e) => {
            println!("set-up failed (not a finding): {e}");
            false
        }
    }
}

fn run_many(
    start: u64,
    seeds: u64,
    limit: Option<Duration>,
    modes: &[Mode],
    size: Size,
    shrink: bool,
    out: &std::path::Path,
) -> bool {
    let t0 = Instant::now();
    let opts = Options::default();
    let mut totals = Totals {
        seeds: (start, start),
        ..Totals::default()
    };
    let mut seed = start;
    loop {
        let done = match limit {
            Some(l) => t0.elapsed() >= l,
            None => seed >= start.saturating_add(seeds),
        };
        if done {
            break;
        }
        for &m in modes {
            let budget = shrink.then(Budget::default);
            let o = check_seed(seed, m, size, &opts, budget);
            totals.add(seed, m, &o);
            if !matches!(o, Outcome::Pass(_)) {
                report(&o, out);
            }
            if totals.ran() % 50 == 0 {
                eprintln!(
                    "{} runs, {} failed, {:.0?}",
                    totals.ran(),
                    totals.failed(),
                    t0.elapsed()
                );
            }
        }
        seed += 1;
        totals.seeds.1 = seed;
    }
    totals.wall = t0.elapsed();
    print!("{totals}");
    totals.clean()
}

/// See `Cmd::Triage`.
fn triage(start: u64, seeds: u64, modes: &[Mode]) -> anyhow::Result<bool> {
    use nri_checker::regressions::{Status, entries};
    let list = entries().map_err(anyhow::Error::msg)?;
    let opts = Options::default();
    let mut clean = true;
    let t0 = Instant::now();
    let mut totals = Totals {
        seeds: (start, start.saturating_add(seeds)),
        ..Totals::default()
    };
    for &m in modes {
        for seed in start..start.saturating_add(seeds) {
            let latest = nri_checker::generate::GENERATOR;
            let listed =
                (list.iter()).find(|e| e.mode == m && e.seed == seed && e.generator == latest);
            let o = check_seed(seed, m, Size::default(), &opts, None);
            totals.add(seed, m, &o);
            let kinds: std::collections::BTreeSet<String> = match &o {
                Outcome::Fail(f, _) => (f.violations.iter())
                    .map(|v| format!("{}/{}", v.invariant, v.kind))
                    .collect(),
                Outcome::SetupError(e) => [format!("setup-error {e}")].into(),
                Outcome::Pass(_) => Default::default(),
            };
            let mark = match (listed.map(|e| e.status), kinds.is_empty()) {
                (None, true) => continue,
                (None, false) => "new",
                (Some(Status::Open), false) => "open",
                (Some(Status::Open), true) => "passes-now",
                (Some(Status::Fixed), false) => "FIXED?",
                (Some(Status::Fixed), true) => continue,
            };
            clean &= mark == "open";
            let kinds: Vec<String> = kinds.into_iter().collect();
            println!("{} {seed} {mark} {}", m.as_str(), kinds.join(" "));
        }
    }
    totals.wall = t0.elapsed();
    print!("{totals}");
    Ok(clean)
}
