//! The SDK's `adjuster` example PRE-LAUNCHED by a real containerd: installed
//! as `WORK/nri/plugins/10-adjuster` with its configuration in
//! `WORK/nri/conf.d/10-adjuster.conf`, started by containerd at boot with
//! the connection on fd 3 (`NRI_PLUGIN_SOCKET=3`). The env var and the
//! annotation from the config file reach the running container.

use anyhow::{Result, ensure};
use nri_e2e_tests::{ContainerOpts, Containerd, Target, plugin_binary, run_e2e};

/// Wall-time budget of one version's run, scaled like every e2e deadline.
const BUDGET: std::time::Duration = std::time::Duration::from_secs(90);

const ENV_KEY: &str = "NRI_E2E_PRELAUNCHED";
const ANNOTATION: &str = "e2e.nri.example/prelaunched";

fn run(version: &str) -> Result<()> {
    let label = format!("sdk_prelaunched {version}");
    let adjuster = plugin_binary("nri-plugin", Target::Example, "adjuster")?;
    let env_value = format!("from-conf-{version}");

    let mut cd = Containerd::new(version, &label)?;
    cd.install_plugin(
        "10",
        "adjuster",
        &adjuster,
        Some(&format!(
            "# written by the nri-e2e-tests\nenv {ENV_KEY}={env_value}\nannotation {ANNOTATION}=conf\n"
        )),
    )?;
    cd.start()?;
    cd.wait_plugin_synchronized("adjuster")?;

    let pod = cd.pod("sdk-pre", &[])?;
    let ctr = cd.container(&pod, "c1", &ContainerOpts::default())?;

    let env = cd.exec_ok(&ctr, &["env"])?;
    ensure!(
        env.lines().any(|l| l == format!("{ENV_KEY}={env_value}")),
        "{ENV_KEY}={env_value} (from 10-adjuster.conf) not in the container's env:\n{env}"
    );
    // Without a config the adjuster would add its defaults instead.
    ensure!(
        !env.lines().any(|l| l.starts_with("NRI_ADJUSTED=")),
        "the adjuster used its defaults, not 10-adjuster.conf:\n{env}"
    );
    let spec = &cd.inspect(&ctr)?["info"]["runtimeSpec"];
    ensure!(
        spec["annotations"][ANNOTATION] == "conf",
        "annotation {ANNOTATION} not in the inspected spec: {}",
        spec["annotations"]
    );

    // containerd launched it: a process runs from WORK/nri/plugins.
    let plugin_path = cd.work().join("nri/plugins/10-adjuster");
    let running = std::fs::read_dir("/proc")?
        .filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_link(e.path().join("exe")).ok())
        .any(|exe| exe == plugin_path);
    ensure!(running, "no process runs {}", plugin_path.display());

    cd.rm(&ctr)?;
    cd.rmp(&pod)?;
    cd.passed();
    Ok(())
}

fn test(version: &str) {
    let name = format!("sdk_prelaunched_{version}");
    run_e2e(&name, BUDGET, || run(version));
}

#[test]
fn sdk_prelaunched_containerd_2_1() {
    test("2.1");
}

#[test]
fn sdk_prelaunched_containerd_2_3() {
    test("2.3");
}

#[test]
fn sdk_prelaunched_containerd_2_4() {
    test("2.4");
}
