//! A plugin that requires sysctls (`Builder::requires`) on real
//! containerd: on 2.1 (NRI v0.8.0, which drops sysctls in silence) it ends
//! at registration with the SDK's `Error::Unsupported`, and containerd logs
//! why; on 2.3 and 2.4 it runs and the sysctl is in the container. The
//! same plugin behind `nri-proxy`: the proxy declares containerd's
//! capabilities to it, so it fails on 2.1 and runs on 2.3 and 2.4 alike.
//!
//! Budget: 60 s per version (about 10 s each measured: two containerd
//! boots' worth of work, no request timeout waited for).

use anyhow::{Result, ensure};
use nri_e2e_tests::{ContainerOpts, Containerd, PluginProcess, Target, plugin_binary, run_e2e};

/// Wall-time budget of one version's run, scaled like every e2e deadline.
const BUDGET: std::time::Duration = std::time::Duration::from_secs(60);

/// An IPC-namespace sysctl: runc sets it in a pod with its own IPC
/// namespace (the harness's pods: `ipc: POD`).
const SYSCTL: &str = "kernel.shm_rmid_forced";

/// Exit status of `requires_plugin` when the runtime cannot serve it.
const UNSUPPORTED: i32 = 3;

fn spawn(cd: &Containerd, socket: &str, name: &str, index: &str) -> Result<PluginProcess> {
    let bin = plugin_binary("nri-e2e-tests", Target::Example, "requires_plugin")?;
    cd.spawn_plugin(
        name,
        &bin,
        &[
            "--socket",
            socket,
            "--name",
            name,
            "--index",
            index,
            "--require",
            "ADJUST_LINUX_SYSCTL",
            "--sysctl",
            &format!("{SYSCTL}=1"),
        ],
        &[],
    )
}

/// The plugin ends at registration, and says why.
fn refused(plugin: &mut PluginProcess, basis: &str) -> Result<String> {
    let status = plugin.wait_exit()?;
    ensure!(
        status.code() == Some(UNSUPPORTED),
        "want exit status {UNSUPPORTED}, got {status}:\n{}",
        plugin.log()
    );
    let line = plugin.wait_for(&["requires_plugin: error:"])?;
    ensure!(
        line.contains("cannot serve this plugin: ADJUST_LINUX_SYSCTL not supported")
            && line.contains(basis),
        "{line}"
    );
    Ok(line)
}

/// A container created now has the sysctl (in its spec and its kernel).
fn has_sysctl(cd: &Containerd, pod_name: &str) -> Result<()> {
    let pod = cd.pod(pod_name, &[])?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;
    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    ensure!(
        spec["linux"]["sysctl"][SYSCTL] == "1",
        "{SYSCTL} not in the spec's sysctls: {}",
        spec["linux"]["sysctl"]
    );
    let seen = cd.exec_ok(
        &ctr,
        &["cat", &format!("/proc/sys/{}", SYSCTL.replace('.', "/"))],
    )?;
    ensure!(seen.trim() == "1", "{SYSCTL} in the container: {seen:?}");
    cd.rm(&ctr)?;
    cd.rmp(&pod)
}

fn direct(cd: &Containerd) -> Result<()> {
    let sock = cd.nri_socket();
    let sock = sock.to_str().unwrap_or_default();
    let mut plugin = spawn(cd, sock, "needs-sysctl", "10")?;
    if cd.version() == "2.1" {
        let line = refused(
            &mut plugin,
            "capabilities inferred from its name and version",
        )?;
        eprintln!("[e2e capabilities 2.1] {line}");
        let logged =
            cd.wait_log("failed to configure plugin.*ADJUST_LINUX_SYSCTL not supported")?;
        eprintln!("[e2e capabilities 2.1] containerd: {logged}");
        return Ok(());
    }
    plugin.wait_for(&["nri-plugin: configured"])?;
    cd.wait_plugin_synchronized("needs-sysctl")?;
    has_sysctl(cd, "caps-direct")?;
    ensure!(plugin.is_running(), "the plugin exited");
    Ok(())
}

fn behind_proxy(cd: &Containerd) -> Result<()> {
    let proxy_bin = plugin_binary("nri-proxy", Target::Bin, "nri-proxy")?;
    let upstream = cd.nri_socket();
    let proxy_sock = cd.work().join("proxy/nri.sock");
    let config = cd.work().join("proxy.yaml");
    std::fs::write(
        &config,
        format!(
            "socket-path: {}\ndisable-launch: true\n\
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
    let sock = proxy_sock.to_str().unwrap_or_default();
    let mut plugin = spawn(cd, sock, "behind", "20")?;
    if cd.version() == "2.1" {
        let line = refused(&mut plugin, "capabilities declared by the runtime")?;
        eprintln!("[e2e capabilities 2.1 proxy] {line}");
        // The proxy's plugin side logs the reason, as containerd does.
        let logged = proxy.wait_for(&["Configure failed", "cannot serve this plugin"])?;
        eprintln!("[e2e capabilities 2.1 proxy] nri-proxy: {logged}");
        return Ok(());
    }
    proxy.wait_for(&["synchronized and active", "20-behind"])?;
    has_sysctl(cd, "caps-proxy")?;
    ensure!(plugin.is_running(), "the plugin behind the proxy exited");
    Ok(())
}

fn run(version: &str) -> Result<()> {
    let mut cd = Containerd::new(version, &format!("capabilities {version}"))?;
    cd.start()?;
    direct(&cd)?;
    behind_proxy(&cd)?;
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("capabilities_{version}");
    run_e2e(&name, BUDGET, || run(version));
}

#[test]
fn capabilities_containerd_2_1() {
    test("2.1");
}

#[test]
fn capabilities_containerd_2_3() {
    test("2.3");
}

#[test]
fn capabilities_containerd_2_4() {
    test("2.4");
}
