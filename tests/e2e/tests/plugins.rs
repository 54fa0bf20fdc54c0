//! The sample plugins under `plugins/` against a real containerd (2.1, 2.3
//! and 2.4), each registered externally on `WORK/nri.sock` with the common flags
//! (`-idx`, `-name`, `-socket-path`) and driven by its real annotation
//! format:
//!
//! - device-injector: `devices.noderesource.dev/container.c1` adds
//!   `/dev/nri-e2e-null` (char 1:3, mode 0666): `ls -l` in the container
//!   shows it and writing to it works.
//! - hook-injector: a `hooks.d` JSON (v1.0.0) in a temp dir, matched on a
//!   container annotation, injects a `prestart` (as `createRuntime`) and a
//!   `createContainer` hook; each writes a marker file on the host with the
//!   OCI state it got on stdin (naming the container id). A container
//!   without the annotation gets none.
//! - ulimit-adjuster: `ulimits.noderesource.dev/container.c1` sets
//!   RLIMIT_NOFILE; `ulimit -n` / `ulimit -Hn` in the container print it
//!   (see the known runc discrepancy for exec'd processes there).
//! - logger: `-add-env` / `-add-annotation` values (`logger-pid-<pid>`)
//!   are in the container and its spec; its log shows the events in order.
//! - network-device-injector: one end of a veth pair made by the test,
//!   named in `netdevice.noderesource.dev/pod`, shows up as `eth33` in a
//!   pod with its own network namespace (CNI bridge), run on a runc with OCI
//!   `linux.netDevices`; it leaves the host, a second container of the pod
//!   sees it too, and removing the pod destroys the pair (its peer on the
//!   host goes away). On containerd 2.1 (NRI v0.8.0, no Linux net devices)
//!   the pod fails with the plugin's reason and the interface stays put.

use anyhow::{Context as _, Result, ensure};
use nri_e2e_tests::{
    ContainerOpts, Containerd, PluginProcess, Target, plugin_binary, poll, run_e2e, timeout,
};

/// Wall-time budget of one test (one plugin on one containerd version),
/// scaled like every e2e deadline; measured 10-30 s on a 2-core machine.
const BUDGET: std::time::Duration = std::time::Duration::from_secs(90);

/// Starts sample plugin `bin` of `package` externally as `idx-name`, with
/// `extra` flags, and waits until containerd has it synchronized.
fn spawn_sample(
    cd: &Containerd,
    package: &str,
    bin: &str,
    idx: &str,
    extra: &[&str],
) -> Result<PluginProcess> {
    let binary = plugin_binary(package, Target::Bin, bin)?;
    let sock = cd.nri_socket();
    let name = format!("e2e-{bin}");
    let mut args = vec![
        "-idx",
        idx,
        "-name",
        &name,
        "-socket-path",
        sock.to_str().unwrap_or_default(),
    ];
    args.extend_from_slice(extra);
    let p = cd.spawn_plugin(bin, &binary, &args, &[])?;
    cd.wait_plugin_synchronized(&name)?;
    Ok(p)
}

fn started(version: &str, test: &str) -> Result<Containerd> {
    let mut cd = Containerd::new(version, &format!("{test} {version}"))?;
    cd.start()?;
    Ok(cd)
}

// ---------------------------------------------------------------- device-injector

fn device_injector(version: &str) -> Result<()> {
    let mut cd = started(version, "device_injector")?;
    let _plugin = spawn_sample(&cd, "nri-device-injector", "device-injector", "10", &[])?;

    let devices =
        "- path: /dev/nri-e2e-null\n  type: c\n  major: 1\n  minor: 3\n  file_mode: 0666\n";
    let pod = cd.pod(
        "devinj",
        &[("devices.noderesource.dev/container.c1", devices)],
    )?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;

    let ls = cd.exec_ok(&ctr, &["ls", "-l", "/dev/nri-e2e-null"])?;
    // busybox: "crw-rw-rw-    1 root     root        1,   3 Jan  1 00:00 /dev/nri-e2e-null"
    ensure!(ls.starts_with("crw-rw-rw-"), "not a 0666 char device: {ls}");
    let fields: Vec<&str> = ls.split_whitespace().collect();
    ensure!(
        fields.windows(2).any(|w| w == ["1,", "3"]),
        "not major 1, minor 3: {ls}"
    );
    // The injected device is usable (the device cgroup allows it).
    cd.exec_ok(&ctr, &["sh", "-c", "echo e2e > /dev/nri-e2e-null"])?;

    // In the OCI spec too.
    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    let dev = spec["linux"]["devices"]
        .as_array()
        .and_then(|a| a.iter().find(|d| d["path"] == "/dev/nri-e2e-null"))
        .with_context(|| {
            format!(
                "/dev/nri-e2e-null not in spec devices: {}",
                spec["linux"]["devices"]
            )
        })?;
    ensure!(
        dev["major"] == 1 && dev["minor"] == 3 && dev["type"] == "c",
        "spec device {dev}"
    );

    cd.rm(&ctr)?;
    cd.rmp(&pod)?;
    cd.passed();
    Ok(())
}

// ---------------------------------------------------------------- hook-injector

fn hook_injector(version: &str) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let mut cd = started(version, "hook_injector")?;

    // hooks.d in a temp dir of this WORK; the hook records its stage and the
    // OCI state (stdin) in a marker file on the host.
    let hooks_d = cd.work().join("hooks.d");
    let markers = cd.work().join("markers");
    std::fs::create_dir_all(&hooks_d)?;
    std::fs::create_dir_all(&markers)?;
    let script = cd.work().join("hook.sh");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\n# $1: stage. OCI state JSON on stdin.\ncat > '{m}/'\"$1\".tmp && mv '{m}/'\"$1\".tmp '{m}/'\"$1\"\n",
            m = markers.display()
        ),
    )?;
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755))?;
    for stage in ["prestart", "createContainer"] {
        let hook = serde_json::json!({
            "version": "1.0.0",
            "hook": {"path": script, "args": ["hook.sh", stage]},
            "when": {"annotations": {"^e2e\\.nri\\.example/hook$": "^yes$"}},
            "stages": [stage],
        });
        std::fs::write(hooks_d.join(format!("e2e-{stage}.json")), hook.to_string())?;
    }

    let _plugin = spawn_sample(
        &cd,
        "nri-hook-injector",
        "hook-injector",
        "10",
        &["-hooks-dir", hooks_d.to_str().unwrap_or_default()],
    )?;

    let pod = cd.pod("hookinj", &[])?;
    // A container without the annotation gets no hooks.
    let plain = cd.container(&pod, "plain", &ContainerOpts::default())?;
    let spec = &cd.inspect(&plain)?["info"]["runtimeSpec"];
    ensure!(
        spec["hooks"].is_null() || spec["hooks"] == serde_json::json!({}),
        "hooks in a container without the annotation: {}",
        spec["hooks"]
    );
    ensure!(
        std::fs::read_dir(&markers)?.next().is_none(),
        "a hook ran for a container without the annotation"
    );

    let ctr = cd.container(
        &pod,
        "c1",
        &ContainerOpts::default().annotation("e2e.nri.example/hook", "yes"),
    )?;
    for stage in ["prestart", "createContainer"] {
        let marker = markers.join(stage);
        let state = poll(&format!("marker {}", marker.display()), timeout(), || {
            Ok(std::fs::read_to_string(&marker).ok())
        })?;
        ensure!(
            state.contains(&ctr),
            "{stage} hook's OCI state does not name container {ctr}: {state}"
        );
    }
    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    // The plugin injects a `prestart` hook as `createRuntime` (prestart is
    // deprecated in OCI; containers/common maps it the same way).
    for (stage, key) in [
        ("prestart", "createRuntime"),
        ("createContainer", "createContainer"),
    ] {
        let hooks = &spec["hooks"][key];
        ensure!(
            hooks.as_array().is_some_and(|a| a
                .iter()
                .any(|h| h["path"] == script.to_str().unwrap_or_default())),
            "no {stage} hook in the spec's {key}: {}",
            spec["hooks"]
        );
    }

    cd.rm(&ctr)?;
    cd.rm(&plain)?;
    cd.rmp(&pod)?;
    cd.passed();
    Ok(())
}

// ---------------------------------------------------------------- ulimit-adjuster

fn ulimit_adjuster(version: &str) -> Result<()> {
    let mut cd = started(version, "ulimit_adjuster")?;
    let _plugin = spawn_sample(&cd, "nri-ulimit-adjuster", "ulimit-adjuster", "10", &[])?;

    // Below the host's hard limit: root here lacks CAP_SYS_RESOURCE.
    let ulimits = "- type: RLIMIT_NOFILE\n  hard: 1536\n  soft: 1234\n";
    let pod = cd.pod(
        "ulimit",
        &[("ulimits.noderesource.dev/container.c1", ulimits)],
    )?;
    // The container's own process reports its limits in its log.
    let ctr = cd.container(
        &pod,
        "c1",
        &ContainerOpts::default().command(&["sh", "-c", "ulimit -n; ulimit -Hn; exec sleep 3600"]),
    )?;
    let lines = cd.wait_container_log("ulimit", "c1", 2)?;
    ensure!(
        lines[..2] == ["1234", "1536"],
        "`ulimit -n; ulimit -Hn` of the container's process: {lines:?}"
    );

    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    let rl = spec["process"]["rlimits"]
        .as_array()
        .and_then(|a| a.iter().find(|r| r["type"] == "RLIMIT_NOFILE"))
        .with_context(|| format!("no RLIMIT_NOFILE in spec: {}", spec["process"]["rlimits"]))?;
    ensure!(rl["soft"] == 1234 && rl["hard"] == 1536, "spec rlimit {rl}");

    // A process started with `crictl exec` gets the spec's rlimits too.
    let hard = cd.exec_ok(&ctr, &["sh", "-c", "ulimit -Hn"])?;
    ensure!(hard.trim() == "1536", "ulimit -Hn via exec: {hard:?}");
    let soft = cd.exec_ok(&ctr, &["sh", "-c", "ulimit -n"])?;
    match soft.trim() {
        "1234" => {}
        // KNOWN DISCREPANCY (runc, not containerd/NRI): with Debian's runc
        // 1.1.5 an exec'd process now and then (about 1 in 6 here, on both
        // containerd versions) starts with its soft NOFILE equal to the hard
        // limit, although the exec process spec says 1234 (the container's
        // own process always gets 1234, checked above). Plain `runc exec`
        // into the same container, without containerd, shows it too (3 of
        // 12 runs); most likely runc init's Go runtime raising/restoring
        // RLIMIT_NOFILE racing with runc's prlimit. Tolerated for exec only,
        // and reported.
        "1536" => eprintln!(
            "[e2e ulimit_adjuster {version}] KNOWN runc discrepancy: exec'd `ulimit -n` printed 1536 (hard) instead of 1234"
        ),
        other => anyhow::bail!("ulimit -n via exec: {other:?}"),
    }

    cd.rm(&ctr)?;
    cd.rmp(&pod)?;
    cd.passed();
    Ok(())
}

// ---------------------------------------------------------------- logger

fn logger(version: &str) -> Result<()> {
    let mut cd = started(version, "logger")?;
    // Default: all events. On 2.1 (NRI v0.8.0) it registers only because
    // the SDK drops the events that runtime cannot deliver.
    let mut plugin = spawn_sample(
        &cd,
        "nri-logger",
        "logger",
        "10",
        &[
            "-add-env",
            "NRI_E2E_LOGGER",
            "-add-annotation",
            "e2e.nri.example/logger",
        ],
    )?;
    let value = format!("logger-pid-{}", plugin.pid());
    if version == "2.1" {
        plugin.wait_for(&["dropped_mask=0x3800"])?;
    }

    let pod = cd.pod("logger", &[])?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;

    let env = cd.exec_ok(&ctr, &["env"])?;
    ensure!(
        env.lines().any(|l| l == format!("NRI_E2E_LOGGER={value}")),
        "NRI_E2E_LOGGER={value} not in the container's env:\n{env}"
    );
    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    ensure!(
        spec["annotations"]["e2e.nri.example/logger"] == value.as_str(),
        "annotation not in the spec: {}",
        spec["annotations"]
    );

    cd.crictl(&["update", "--cpu-share", "512", &ctr])?;
    cd.rm(&ctr)?;
    cd.rmp(&pod)?;

    let mut want = vec![
        "RunPodSandbox",
        "CreateContainer",
        "PostCreateContainer",
        "StartContainer",
        "PostStartContainer",
        "UpdateContainer",
        "PostUpdateContainer",
        "StopContainer",
        "RemoveContainer",
        "StopPodSandbox",
        "RemovePodSandbox",
    ];
    if version != "2.1" {
        want.insert(2, "ValidateContainerAdjustment");
    }
    let events = plugin.wait_event_blocks(&want)?;
    eprintln!("[e2e logger {version}] events: {events:?}");
    if version == "2.1" {
        ensure!(
            !events.iter().any(|e| e == "ValidateContainerAdjustment"),
            "containerd 2.1 sent ValidateContainerAdjustment: {events:?}"
        );
    }
    ensure!(plugin.is_running(), "logger exited");
    cd.passed();
    Ok(())
}

// ---------------------------------------------------------------- network-device-injector

/// A veth pair on the host, deleted on drop if it is still there.
struct Veth {
    host: String,
    moved: String,
}

impl Veth {
    fn new(tag: &str) -> Result<Self> {
        let base = format!("nrv{tag}{}", std::process::id() % 100_000);
        let v = Self {
            host: format!("{base}a"),
            moved: format!("{base}b"),
        };
        v.drop_links();
        ip(&[
            "link", "add", &v.host, "type", "veth", "peer", "name", &v.moved,
        ])?;
        Ok(v)
    }

    fn drop_links(&self) {
        for l in [&self.host, &self.moved] {
            let _ = ip(&["link", "del", l]);
        }
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        self.drop_links();
    }
}

/// `ip ARGS...`; an error carries its stderr.
fn ip(args: &[&str]) -> Result<String> {
    let out = std::process::Command::new("ip").args(args).output()?;
    ensure!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

fn link_exists(name: &str) -> bool {
    std::path::Path::new("/sys/class/net").join(name).exists()
}

fn network_device_injector(version: &str) -> Result<()> {
    let mut cd = started(version, "network_device_injector")?;
    let _plugin = spawn_sample(
        &cd,
        "nri-network-device-injector",
        "network-device-injector",
        "10",
        &[],
    )?;
    let veth = Veth::new(&version.replace('.', ""))?;

    let devices = format!("- name: {}\n  new_name: eth33\n", veth.moved);
    let annotations = [("netdevice.noderesource.dev/pod", devices.as_str())];
    if version == "2.1" {
        // The runtime would drop the devices without a word: the plugin
        // fails the pod instead, saying why.
        let err = match cd.pod_in_netns("netdev", &annotations, "runc-netdev") {
            Ok(id) => anyhow::bail!("pod {id} ran on a runtime that cannot move its devices"),
            Err(e) => format!("{e:#}"),
        };
        let log = std::fs::read_to_string(cd.log_path())?;
        ensure!(
            log.contains("NRI v0.11 or later needed"),
            "containerd's log lacks the plugin's reason (crictl said: {err})"
        );
        ensure!(link_exists(&veth.moved), "{} left the host", veth.moved);
        cd.passed();
        return Ok(());
    }
    let pod = cd.pod_in_netns("netdev", &annotations, "runc-netdev")?;
    let c1 = cd.container(&pod, "c1", &ContainerOpts::default())?;

    // Inside: the CNI interface and the injected one under its new name.
    let links = cd.exec_ok(&c1, &["ls", "/sys/class/net"])?;
    let links: Vec<&str> = links.split_whitespace().collect();
    ensure!(
        links.contains(&"eth33") && links.contains(&"eth0"),
        "eth33 and eth0 not both in the pod's namespace: {links:?}"
    );
    ensure!(
        !link_exists(&veth.moved),
        "{} is still on the host after the container started",
        veth.moved
    );
    let spec = &cd.inspect(&c1)?["info"]["runtimeSpec"];
    ensure!(
        spec["linux"]["netDevices"][&veth.moved]["name"] == "eth33",
        "first container's spec lacks the net device: {}",
        spec["linux"]["netDevices"]
    );

    // A second container shares the pod's namespace: it sees the device and
    // its own spec moves nothing.
    let c2 = cd.container(&pod, "c2", &ContainerOpts::default())?;
    let links2 = cd.exec_ok(&c2, &["ls", "/sys/class/net"])?;
    ensure!(
        links2.split_whitespace().any(|l| l == "eth33"),
        "second container does not see eth33: {links2}"
    );
    let spec2 = &cd.inspect(&c2)?["info"]["runtimeSpec"];
    ensure!(
        spec2["linux"]["netDevices"]
            .as_object()
            .is_none_or(|m| m.is_empty()),
        "second container's spec moves devices again: {}",
        spec2["linux"]["netDevices"]
    );

    // Removing the pod destroys its namespace, and with it the moved end of
    // the pair; the kernel then deletes the host end too.
    cd.rm(&c2)?;
    cd.rm(&c1)?;
    cd.rmp(&pod)?;
    poll(
        &format!("{} to go with the pod", veth.host),
        timeout(),
        || Ok((!link_exists(&veth.host)).then_some(())),
    )?;
    cd.passed();
    Ok(())
}

// ---------------------------------------------------------------- tests

fn run(name: &str, version: &str, f: fn(&str) -> Result<()>) {
    let test = format!("{name}_{version}");
    run_e2e(&test, BUDGET, || f(version));
}

#[test]
fn device_injector_containerd_2_1() {
    run("device_injector", "2.1", device_injector);
}

#[test]
fn device_injector_containerd_2_3() {
    run("device_injector", "2.3", device_injector);
}

#[test]
fn device_injector_containerd_2_4() {
    run("device_injector", "2.4", device_injector);
}

#[test]
fn hook_injector_containerd_2_1() {
    run("hook_injector", "2.1", hook_injector);
}

#[test]
fn hook_injector_containerd_2_3() {
    run("hook_injector", "2.3", hook_injector);
}

#[test]
fn hook_injector_containerd_2_4() {
    run("hook_injector", "2.4", hook_injector);
}

#[test]
fn ulimit_adjuster_containerd_2_1() {
    run("ulimit_adjuster", "2.1", ulimit_adjuster);
}

#[test]
fn ulimit_adjuster_containerd_2_3() {
    run("ulimit_adjuster", "2.3", ulimit_adjuster);
}

#[test]
fn ulimit_adjuster_containerd_2_4() {
    run("ulimit_adjuster", "2.4", ulimit_adjuster);
}

#[test]
fn logger_containerd_2_1() {
    run("logger", "2.1", logger);
}

#[test]
fn logger_containerd_2_3() {
    run("logger", "2.3", logger);
}

#[test]
fn logger_containerd_2_4() {
    run("logger", "2.4", logger);
}

#[test]
fn network_device_injector_containerd_2_1() {
    run("network_device_injector", "2.1", network_device_injector);
}

#[test]
fn network_device_injector_containerd_2_3() {
    run("network_device_injector", "2.3", network_device_injector);
}

#[test]
fn network_device_injector_containerd_2_4() {
    run("network_device_injector", "2.4", network_device_injector);
}
