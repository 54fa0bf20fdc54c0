//! Launched (pre-installed) plugins: discovery, configuration lookup,
//! spawning with the socket on fd 3, output forwarding, termination.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::error::Error;
use nri_merge::PluginId;

/// A plugin found in the plugin directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiscoveredPlugin {
    /// Identity from the file name `NN-name`.
    pub id: PluginId,
    /// The executable.
    pub path: PathBuf,
    /// Configuration text (from `NN-name.conf` or `name.conf`), or empty.
    pub config: String,
    /// The file is a WebAssembly module (it starts with
    /// [`nri_api::WASM_MAGIC`]): loaded into the runtime, not executed.
    pub wasm: bool,
}

/// Lists the executables `NN-name` in `plugin_dir`, sorted by index then
/// name, with their configuration from `config_dir`.
///
/// A missing directory means no plugins. Directories and files without any
/// execute bit are skipped; a file whose name is not `NN-name` is skipped
/// **with a warning** (upstream fails the whole start). WebAssembly modules
/// are listed with [`DiscoveredPlugin::wasm`] set.
pub fn discover(plugin_dir: &Path, config_dir: &Path) -> Result<Vec<DiscoveredPlugin>, Error> {
    let entries = match std::fs::read_dir(plugin_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => {
            return Err(Error::io(
                format!("reading plugin directory {}", plugin_dir.display()),
                &e,
            ));
        }
    };
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(meta) = std::fs::metadata(&path) else {
            tracing::warn!(path = %path.display(), "skipping unreadable entry in the NRI plugin directory");
            continue;
        };
        if !meta.is_file() || meta.permissions().mode() & 0o111 == 0 {
            continue;
        }
        let file_name = entry.file_name().to_string_lossy().into_owned();
        let id = match nri_api::parse_plugin_file_name(&file_name)
            .map_err(|e| e.to_string())
            .and_then(|(idx, name)| PluginId::new(idx, name).map_err(|e| e.to_string()))
        {
            Ok(id) => id,
            Err(reason) => {
                tracing::warn!(path = %path.display(), reason = %reason, "skipping NRI plugin with an invalid name (expected NN-name)");
                continue;
            }
        };
        let wasm = is_wasm(&path);
        let config = match read_config(config_dir, &id) {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(plugin = %id, error = %e, "skipping NRI plugin: cannot read its configuration");
                continue;
            }
        };
        out.push(DiscoveredPlugin {
            id,
            path,
            config,
            wasm,
        });
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}

/// Whether `path` is a WebAssembly module (starts with
/// [`nri_api::WASM_MAGIC`]); unreadable files are not.
pub fn is_wasm(path: &Path) -> bool {
    use std::io::Read;
    let mut buf = [0u8; 8];
    std::fs::File::open(path)
        .and_then(|mut f| f.read_exact(&mut buf))
        .map(|()| buf == nri_api::WASM_MAGIC)
        .unwrap_or(false)
}

fn read_config(dir: &Path, id: &PluginId) -> Result<String, Error> {
    for name in [format!("{id}.conf"), format!("{}.conf", id.name())] {
        let p = dir.join(name);
        match std::fs::read_to_string(&p) {
            Ok(s) => return Ok(s),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(format!("reading {}", p.display()), &e)),
        }
    }
    Ok(String::new())
}

/// Spawns a discovered plugin with its end of a socketpair on fd 3.
/// Returns the child and the runtime's end.
pub(crate) fn spawn(
    plugin: &DiscoveredPlugin,
) -> Result<(tokio::process::Child, tokio::net::UnixStream), Error> {
    let (ours, theirs) = nri_mux::socketpair().map_err(|e| Error::Io {
        context: "creating socketpair".into(),
        kind: std::io::ErrorKind::Other,
        message: e.to_string(),
    })?;
    let mut cmd = tokio::process::Command::new(&plugin.path);
    cmd.env_clear()
        .env(nri_api::ENV_PLUGIN_NAME, plugin.id.name())
        .env(nri_api::ENV_PLUGIN_IDX, plugin.id.index())
        .env("PATH", crate::config::LAUNCHED_PLUGIN_PATH)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    nri_mux::pass_to_child(cmd.as_std_mut(), theirs);
    let child = cmd.spawn().map_err(|e| {
        Error::io(
            format!("launching NRI plugin {}", plugin.path.display()),
            &e,
        )
    })?;
    // Dropping the command closes our copy of the child's end.
    drop(cmd);
    let stream = nri_mux::into_tokio(ours).map_err(|e| Error::Io {
        context: "registering socket".into(),
        kind: std::io::ErrorKind::Other,
        message: e.to_string(),
    })?;
    Ok((child, stream))
}

/// Stops a launched plugin: SIGTERM, up to `grace` to exit, then SIGKILL.
pub(crate) async fn terminate(mut child: tokio::process::Child, grace: Duration, name: &str) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    if let Some(pid) = child.id() {
        send_sigterm(pid);
    }
    match tokio::time::timeout(grace, child.wait()).await {
        Ok(_) => {}
        Err(_) => {
            tracing::warn!(plugin = %name, ?grace, "NRI plugin did not exit after SIGTERM; killing it");
            let _ = child.start_kill();
            let _ = child.wait().await;
        }
    }
}

#[allow(unsafe_code)]
fn send_sigterm(pid: u32) {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return;
    };
    // SAFETY: kill(2) takes two integers and has no memory effects; `pid`
    // is our own child, not yet reaped (we hold its `Child`), so the pid
    // cannot have been reused.
    unsafe {
        libc::kill(pid, libc::SIGTERM);
    }
}
