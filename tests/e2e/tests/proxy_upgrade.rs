//! A plugin upgraded without a gap behind `nri-proxy` on a real containerd
//! (docs/runtime/upgrades.md): a `required` plugin (the SDK's `adjuster`
//! example, old instance) is replaced by a new instance of itself, the new
//! process started first and the old one stopped (SIGTERM) once the new one
//! is active, as a DaemonSet rolling with `maxSurge: 1, maxUnavailable: 0`
//! does, while pods are being created back to back.
//!
//! Checks: no pod or container creation is refused; every container was
//! adjusted exactly once, by the old or the new instance (the one whose
//! log says it adjusted that container is the one whose value is in the
//! container's environment, and no other log says so); both instances
//! served some containers; the proxy logs the hand-over (the old instance
//! `superseded`, the new one active). The old instance's own log shows no
//! hand-over: the wire cannot tell it (it gets no more events and ends on
//! SIGTERM; see docs/runtime/upgrades.md).
//!
//! Budget: 120 s per containerd version (`BUDGET`); measured 12-14 s each
//! on the 2-core machine once the binaries are built
//! (`NRI_E2E=1 cargo test -p nri-e2e-tests --test proxy_upgrade`).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, ensure};
use nri_e2e_tests::{
    ContainerOpts, Containerd, PluginProcess, Target, check_budget, e2e_enabled, plugin_binary,
    poll, timeout,
};

/// Wall-time budget of one version's run, scaled like every e2e deadline.
const BUDGET: Duration = Duration::from_secs(120);

const ENV_KEY: &str = "NRI_E2E_UPGRADE";

/// Containers created after the old instance stopped, before the stream
/// ends.
const AFTER: usize = 3;

/// One creation of the stream: its container name and what became of it.
type Created = (String, Result<String, String>);

/// Creates pod `up-N` with container `cN` back to back until `stop`;
/// every outcome (id or the refusal) goes to `out`.
fn stream(cd: &Containerd, stop: &AtomicBool, count: &AtomicUsize, out: &Mutex<Vec<Created>>) {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("c{n}");
        let r = cd
            .pod(&format!("up-{n}"), &[])
            .and_then(|pod| cd.container(&pod, &name, &ContainerOpts::default()));
        out.lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((name, r.map_err(|e| format!("{e:#}"))));
        count.fetch_add(1, Ordering::Relaxed);
        n += 1;
    }
}

/// The containers an adjuster's log says it adjusted, with how often.
fn adjusted(p: &PluginProcess) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for l in p.log().lines().filter(|l| l.contains("adjusting")) {
        if let Some(c) = l
            .split_whitespace()
            .find_map(|w| w.strip_prefix("container="))
        {
            *m.entry(c.to_owned()).or_default() += 1;
        }
    }
    m
}

/// Waits until `count` is at least `n`.
fn wait_count(count: &AtomicUsize, n: usize, what: &str) -> Result<()> {
    poll(what, timeout(), || {
        Ok((count.load(Ordering::Relaxed) >= n).then_some(()))
    })
}

/// The value of `ENV_KEY` in container `id`'s OCI spec (every line of it).
fn env_values(cd: &Containerd, id: &str) -> Result<Vec<String>> {
    let v = cd.inspect(id)?;
    let env = v
        .pointer("/info/runtimeSpec/process/env")
        .and_then(|e| e.as_array())
        .with_context(|| format!("no process env in the inspection of {id}"))?;
    Ok(env
        .iter()
        .filter_map(|e| e.as_str()?.strip_prefix(&format!("{ENV_KEY}=")))
        .map(str::to_owned)
        .collect())
}

#[allow(clippy::too_many_lines)]
fn run(version: &str) -> Result<()> {
    let label = format!("proxy upgrade {version}");
    let proxy_bin = plugin_binary("nri-proxy", Target::Bin, "nri-proxy")?;
    let adjuster = plugin_binary("nri-plugin", Target::Example, "adjuster")?;
    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let proxy_sock = cd.work().join("proxy/nri.sock");
    let config = cd.work().join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "socket-path: {}\ndisable-launch: true\n\
             plugins:\n  e2e-upgrade: {{ policy: required }}\n\
             proxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: {}\n",
            proxy_sock.display(),
            cd.nri_socket().display()
        ),
    )?;
    let mut proxy = cd.spawn_plugin(
        "proxy",
        &proxy_bin,
        &["--config", config.to_str().unwrap_or_default()],
        &[("NRI_PROXY_LOG", "info")],
    )?;
    proxy.wait_for(&["plugin side started"])?;
    cd.wait_plugin_synchronized("proxy")?;
    let sock = proxy_sock.to_str().unwrap_or_default().to_owned();
    let instance = |cd: &Containerd, tag: &str| {
        cd.spawn_plugin(
            &format!("adjuster-{tag}"),
            &adjuster,
            &[
                "--socket",
                &sock,
                "--name",
                "e2e-upgrade",
                "--index",
                "10",
                "--env",
                &format!("{ENV_KEY}={tag}"),
            ],
            &[],
        )
    };
    let mut old = instance(&cd, "old")?;
    proxy.wait_for(&["synchronized and active", "10-e2e-upgrade"])?;

    let stop = AtomicBool::new(false);
    let count = AtomicUsize::new(0);
    let out = Mutex::new(Vec::new());
    let (new, stopped_at) = std::thread::scope(|s| {
        let (cd_ref, stop_ref, count_ref, out_ref) = (&cd, &stop, &count, &out);
        s.spawn(move || stream(cd_ref, stop_ref, count_ref, out_ref));
        let rolled = (|| -> Result<(PluginProcess, usize)> {
            wait_count(&count, 2, "two creations before the upgrade")?;
            // The new process first, as a surging DaemonSet starts the new pod.
            let mut new = instance(&cd, "new")?;
            new.wait_for(&["configured"])?;
            poll("the new instance active in the proxy", timeout(), || {
                let log = proxy.log();
                let n = log
                    .lines()
                    .filter(|l| {
                        l.contains("synchronized and active") && l.contains("10-e2e-upgrade")
                    })
                    .count();
                Ok((n >= 2).then_some(()))
            })?;
            proxy.wait_for(&["superseded", "10-e2e-upgrade"])?;
            // Then the old one stops, as the rollout deletes the old pod.
            let n = count.load(Ordering::Relaxed);
            wait_count(&count, n + 1, "a creation after the take-over")?;
            let st = std::process::Command::new("kill")
                .args(["-TERM", &old.pid().to_string()])
                .status()?;
            ensure!(st.success(), "kill -TERM of the old instance failed");
            poll("the old instance to exit", timeout(), || {
                Ok((!old.is_running()).then_some(()))
            })?;
            let stopped_at = count.load(Ordering::Relaxed);
            wait_count(
                &count,
                stopped_at + AFTER,
                "creations after the old instance stopped",
            )?;
            Ok((new, stopped_at))
        })();
        stop.store(true, Ordering::Relaxed);
        rolled
    })?;
    let created = out.into_inner().unwrap_or_else(|e| e.into_inner());
    eprintln!(
        "[e2e {label}] {} containers created during the upgrade, the old instance stopped after {stopped_at}",
        created.len()
    );
    let refused: Vec<_> = (created.iter())
        .filter_map(|(c, r)| r.as_ref().err().map(|e| format!("{c}: {e}")))
        .collect();
    ensure!(
        refused.is_empty(),
        "{} of {} creations refused during the upgrade:\n{}",
        refused.len(),
        created.len(),
        refused.join("\n")
    );
    let (by_old, by_new) = (adjusted(&old), adjusted(&new));
    for (name, id) in created
        .iter()
        .filter_map(|(c, r)| Some((c, r.as_ref().ok()?)))
    {
        let (o, n) = (
            by_old.get(name).copied().unwrap_or(0),
            by_new.get(name).copied().unwrap_or(0),
        );
        ensure!(
            o + n == 1,
            "container {name} adjusted {o} times by the old instance and {n} times by the new one"
        );
        let want = if o == 1 { "old" } else { "new" };
        let got = env_values(&cd, id)?;
        ensure!(
            got == [want],
            "container {name}: {ENV_KEY} is {got:?}, expected [{want:?}] (the instance whose log says it adjusted it)"
        );
    }
    ensure!(
        !by_old.is_empty() && !by_new.is_empty(),
        "each instance should have served some containers: old {by_old:?}, new {by_new:?}"
    );
    ensure!(proxy.is_running(), "the proxy exited");
    drop(new);
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("proxy_upgrade_{version}");
    if !e2e_enabled(&name) {
        return;
    }
    let t0 = std::time::Instant::now();
    if let Err(e) = run(version) {
        panic!("{name}: {e:#}");
    }
    check_budget(&name, t0.elapsed(), BUDGET);
}

#[test]
fn proxy_upgrade_containerd_2_1() {
    test("2.1");
}

#[test]
fn proxy_upgrade_containerd_2_3() {
    test("2.3");
}

#[test]
fn proxy_upgrade_containerd_2_4() {
    test("2.4");
}
