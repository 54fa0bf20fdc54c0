//! A stand-in CNI set-up for critest's pods (which have their own network
//! namespace, so containerd needs a CNI network): two tiny CNI plugins that
//! configure nothing and report an address, enough for containerd to run
//! the pod. critest's NRI cases never use the network.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;

use anyhow::Result;

/// A CNI plugin (CNI spec 1.0) that does nothing and reports one interface
/// in the pod's namespace with an address: `lo` -> 127.0.0.1, else a
/// 10.88/16 address derived from the process id.
const PLUGIN: &str = r#"#!/bin/sh
# Stand-in CNI plugin for the e2e tests: configures nothing.
cat >/dev/null
case "$CNI_COMMAND" in
ADD)
    if [ "$CNI_IFNAME" = lo ]; then addr=127.0.0.1/8; else
        n=$(( $$ % 250 + 2 )); addr=10.88.$(( $$ / 250 % 250 )).$n/16; fi
    printf '{"cniVersion":"1.0.0","interfaces":[{"name":"%s","sandbox":"%s"}],"ips":[{"address":"%s","interface":0}]}' \
        "$CNI_IFNAME" "$CNI_NETNS" "$addr"
    ;;
VERSION)
    printf '{"cniVersion":"1.0.0","supportedVersions":["0.4.0","1.0.0"]}'
    ;;
esac
exit 0
"#;

const CONFLIST: &str =
    r#"{"cniVersion":"1.0.0","name":"nri-e2e","plugins":[{"type":"nri-e2e-cni"}]}"#;

/// Installs the plugins (also as `loopback`, which containerd runs for
/// `lo`) and the network config in WORK's CNI dirs; call before `start`.
pub fn install(work: &Path) -> Result<()> {
    let bin = work.join("cni/bin");
    let conf = work.join("cni/net.d");
    std::fs::create_dir_all(&bin)?;
    std::fs::create_dir_all(&conf)?;
    for name in ["nri-e2e-cni", "loopback"] {
        let p = bin.join(name);
        std::fs::write(&p, PLUGIN)?;
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755))?;
    }
    std::fs::write(conf.join("10-nri-e2e.conflist"), CONFLIST)?;
    Ok(())
}
