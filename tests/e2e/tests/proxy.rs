//! `nri-proxy` between a real containerd and its plugins: the proxy
//! registers externally on `WORK/nri.sock`; behind it, the SDK's
//! `adjuster` example and the Go plugin on containerd/nri v0.12.5's stub
//! (`interop/bin/nri-go-plugin`, built by `scripts/build-go-peers.sh`), and
//! a second Go plugin that hangs on CreateContainer.
//!
//! Checks: both adjustments are inside the running container; the hanging
//! plugin fails only its own call (its timeout behind the proxy is 500 ms,
//! containerd's is 2 s) and stays connected; containerd keeps the proxy.
//! With a required plugin that never registered, `crictl runp` fails with
//! a message naming it. containerd restarted under the running proxy: the
//! plugins behind it never disconnect, and the next container still gets
//! both adjustments.

use std::path::PathBuf;

use anyhow::{Result, ensure};
use nri_e2e_tests::{ContainerOpts, Containerd, Target, plugin_binary, run_e2e, workspace_root};

/// Wall-time budget of one version's run, scaled like every e2e deadline.
const BUDGET: std::time::Duration = std::time::Duration::from_secs(90);

const ENV_KEY: &str = "NRI_E2E_PROXY";

fn go_plugin() -> Result<PathBuf> {
    let dir = std::env::var_os("NRI_INTEROP_BIN")
        .map_or_else(|| workspace_root().join("interop/bin"), PathBuf::from);
    let bin = dir.join("nri-go-plugin");
    ensure!(
        bin.is_file(),
        "{} missing: build the Go peers with `bash scripts/build-go-peers.sh`",
        bin.display()
    );
    Ok(bin)
}

#[allow(clippy::too_many_lines)]
fn run(version: &str) -> Result<()> {
    let label = format!("proxy {version}");
    let proxy_bin = plugin_binary("nri-proxy", Target::Bin, "nri-proxy")?;
    let adjuster = plugin_binary("nri-plugin", Target::Example, "adjuster")?;
    let go = go_plugin()?;

    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let upstream = cd.nri_socket();
    let proxy_sock = cd.work().join("proxy/nri.sock");
    let config = cd.work().join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "socket-path: {}\ndisable-launch: true\nrequest-timeout: 1s\n\
             plugins:\n  hang:\n    request-timeout: 500ms\n\
             proxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: {}\n",
            proxy_sock.display(),
            upstream.display()
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
    let sock = proxy_sock.to_str().unwrap_or_default();

    let env_value = format!("behind-{version}");
    let mut adj = cd.spawn_plugin(
        "adjuster",
        &adjuster,
        &[
            "--socket",
            sock,
            "--name",
            "e2e-adjuster",
            "--index",
            "10",
            "--env",
            &format!("{ENV_KEY}={env_value}"),
        ],
        &[],
    )?;
    proxy.wait_for(&["synchronized and active", "10-e2e-adjuster"])?;
    let mut gop = cd.spawn_plugin(
        "go-plugin",
        &go,
        &[
            "--socket", sock, "--name", "gop", "--idx", "30", "--adjust", "env",
        ],
        &[],
    )?;
    proxy.wait_for(&["synchronized and active", "30-gop"])?;
    let mut hang = cd.spawn_plugin(
        "go-hang",
        &go,
        &[
            "--socket",
            sock,
            "--name",
            "hang",
            "--idx",
            "20",
            "--adjust",
            "env",
            "--delay-event",
            "CreateContainer=30s",
        ],
        &[],
    )?;
    proxy.wait_for(&["synchronized and active", "20-hang"])?;

    let pod = cd.pod("proxy", &[])?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;
    adj.wait_for(&["adjusting", "c1"])?;

    let env = cd.exec_ok(&ctr, &["env"])?;
    for want in [
        format!("{ENV_KEY}={env_value}"),
        "BENCH_PLUGIN_30=30-gop".to_owned(),
    ] {
        ensure!(
            env.lines().any(|l| l == want),
            "{want} not in the container's env:\n{env}"
        );
    }
    ensure!(
        !env.lines().any(|l| l.starts_with("BENCH_PLUGIN_20=")),
        "the hanging plugin's adjustment arrived:\n{env}"
    );
    // The hanging plugin failed its own call behind the proxy, and is still
    // there; containerd still has the proxy.
    proxy.wait_for(&["20-hang", "no answer within"])?;
    ensure!(hang.is_running(), "the hanging plugin exited");
    ensure!(gop.is_running(), "the Go plugin exited");
    ensure!(adj.is_running(), "the adjuster exited");
    ensure!(proxy.is_running(), "the proxy exited");
    let c2 = cd.container(&pod, "c2", &ContainerOpts::default())?;
    adj.wait_for(&["adjusting", "c2"])?;
    let env = cd.exec_ok(&c2, &["env"])?;
    ensure!(
        env.lines().any(|l| l == format!("{ENV_KEY}={env_value}")),
        "the next container lacks the adjustment:\n{env}"
    );
    cd.rm(&ctr)?;
    cd.rm(&c2)?;
    cd.rmp(&pod)?;
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("proxy_{version}");
    run_e2e(&name, BUDGET, || run(version));
}

/// A plugin marked required behind the proxy that never registered:
/// `crictl runp` fails with a message naming it.
fn run_required_missing(version: &str) -> Result<()> {
    let label = format!("proxy required {version}");
    let proxy_bin = plugin_binary("nri-proxy", Target::Bin, "nri-proxy")?;
    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let config = cd.work().join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "socket-path: {}\ndisable-launch: true\n\
             plugins:\n  e2e-guard: {{ policy: required }}\n\
             proxy:\n  name: proxy\n  index: \"50\"\n  upstream-socket: {}\n",
            cd.work().join("proxy/nri.sock").display(),
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
    let err = match cd.pod("guarded", &[]) {
        Ok(id) => anyhow::bail!("pod {id} was created without the required plugin"),
        Err(e) => format!("{e:#}"),
    };
    ensure!(
        err.contains("e2e-guard"),
        "the error does not name the plugin: {err}"
    );
    ensure!(proxy.is_running(), "the proxy exited");
    cd.passed();
    Ok(())
}

fn test_required_missing(version: &str) {
    let name = format!("proxy_required_missing_{version}");
    run_e2e(&name, BUDGET, || run_required_missing(version));
}

/// containerd restarts while the proxy runs (the DaemonSet form): the
/// proxy registers again, its plugins (Rust and Go) stay connected and
/// registered once, the container made before the restart keeps running,
/// and a container made after it has both adjustments.
#[allow(clippy::too_many_lines)]
fn run_restart(version: &str) -> Result<()> {
    let label = format!("proxy restart {version}");
    let proxy_bin = plugin_binary("nri-proxy", Target::Bin, "nri-proxy")?;
    let adjuster = plugin_binary("nri-plugin", Target::Example, "adjuster")?;
    let go = go_plugin()?;
    let mut cd = Containerd::new(version, &label)?;
    cd.start()?;
    let proxy_sock = cd.work().join("proxy/nri.sock");
    let config = cd.work().join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "socket-path: {}\ndisable-launch: true\n\
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
    let sock = proxy_sock.to_str().unwrap_or_default();
    let env_value = format!("restart-{version}");
    let mut adj = cd.spawn_plugin(
        "adjuster",
        &adjuster,
        &[
            "--socket",
            sock,
            "--name",
            "e2e-adjuster",
            "--index",
            "10",
            "--env",
            &format!("{ENV_KEY}={env_value}"),
        ],
        &[],
    )?;
    proxy.wait_for(&["synchronized and active", "10-e2e-adjuster"])?;
    let mut gop = cd.spawn_plugin(
        "go-plugin",
        &go,
        &[
            "--socket", sock, "--name", "gop", "--idx", "30", "--adjust", "env",
        ],
        &[],
    )?;
    proxy.wait_for(&["synchronized and active", "30-gop"])?;
    let pod = cd.pod("restart", &[])?;
    let c1 = cd.container(&pod, "c1", &ContainerOpts::default())?;

    cd.restart()?;
    cd.wait_plugin_synchronized("proxy")?;
    // The proxy's second registration is in (its log counts them).
    nri_e2e_tests::poll(
        "the proxy's second Synchronize",
        nri_e2e_tests::timeout(),
        || {
            Ok((proxy
                .log()
                .matches("nri-proxy synchronized by the runtime")
                .count()
                >= 2)
                .then_some(()))
        },
    )?;

    let c2 = cd.container(&pod, "c2", &ContainerOpts::default())?;
    adj.wait_for(&["adjusting", "c2"])?;
    let env = cd.exec_ok(&c2, &["env"])?;
    for want in [
        format!("{ENV_KEY}={env_value}"),
        "BENCH_PLUGIN_30=30-gop".to_owned(),
    ] {
        ensure!(
            env.lines().any(|l| l == want),
            "{want} not in the env of the container made after the restart:\n{env}"
        );
    }
    cd.exec_ok(&c1, &["true"])?;
    ensure!(adj.is_running(), "the adjuster exited");
    ensure!(gop.is_running(), "the Go plugin exited");
    ensure!(proxy.is_running(), "the proxy exited");
    let log = proxy.log();
    for id in ["10-e2e-adjuster", "30-gop"] {
        let n = log
            .lines()
            .filter(|l| l.contains("synchronized and active") && l.contains(id))
            .count();
        ensure!(n == 1, "{id} registered {n} times with the proxy:\n{log}");
        ensure!(
            !log.lines()
                .any(|l| l.contains("disconnected") && l.contains(id)),
            "{id} was disconnected:\n{log}"
        );
    }
    cd.rm(&c1)?;
    cd.rm(&c2)?;
    cd.rmp(&pod)?;
    cd.passed();
    Ok(())
}

fn test_restart(version: &str) {
    let name = format!("proxy_containerd_restart_{version}");
    run_e2e(&name, BUDGET, || run_restart(version));
}

#[test]
fn proxy_containerd_restart_containerd_2_1() {
    test_restart("2.1");
}

#[test]
fn proxy_containerd_restart_containerd_2_3() {
    test_restart("2.3");
}

#[test]
fn proxy_containerd_restart_containerd_2_4() {
    test_restart("2.4");
}

#[test]
fn proxy_required_missing_containerd_2_1() {
    test_required_missing("2.1");
}

#[test]
fn proxy_required_missing_containerd_2_3() {
    test_required_missing("2.3");
}

#[test]
fn proxy_required_missing_containerd_2_4() {
    test_required_missing("2.4");
}

#[test]
fn proxy_containerd_2_1() {
    test("2.1");
}

#[test]
fn proxy_containerd_2_3() {
    test("2.3");
}

#[test]
fn proxy_containerd_2_4() {
    test("2.4");
}
