//! Container images made offline for the tests: a static binary built on
//! this machine's target, packed into an OCI image layout tarball laid out
//! as `deploy/Containerfile`'s final stage says (where the binary goes, the
//! entrypoint, the user), ready for `ctr images import`. No registry, no
//! image builder.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::json;

use crate::{BuildTimer, run_with_deadline, workspace_root};

/// The target the static binaries are built for (this machine's; there is
/// no musl target here).
pub const STATIC_TARGET: &str = "x86_64-unknown-linux-gnu";

/// What the final stage of a Containerfile makes of the image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageDefinition {
    /// Where `COPY --from=build` puts the binary.
    pub binary_path: String,
    /// `ENTRYPOINT` (exec form).
    pub entrypoint: Vec<String>,
    /// `USER` (empty: none, so root).
    pub user: String,
}

impl ImageDefinition {
    /// Reads the final stage (after the last `FROM`) of a Containerfile.
    ///
    /// # Errors
    ///
    /// No `COPY --from=build SRC DST` or no exec-form `ENTRYPOINT` there.
    pub fn parse(containerfile: &str) -> Result<Self> {
        let lines: Vec<&str> = containerfile
            .lines()
            .map(str::trim)
            .filter(|l| !l.starts_with('#'))
            .collect();
        let last = lines
            .iter()
            .rposition(|l| l.starts_with("FROM "))
            .context("no FROM in the Containerfile")?;
        let mut def = ImageDefinition {
            binary_path: String::new(),
            entrypoint: Vec::new(),
            user: String::new(),
        };
        for l in &lines[last..] {
            if let Some(rest) = l.strip_prefix("COPY --from=build ") {
                def.binary_path = rest.split_whitespace().last().unwrap_or_default().into();
            } else if let Some(rest) = l.strip_prefix("ENTRYPOINT ") {
                def.entrypoint = serde_json::from_str(rest)
                    .with_context(|| format!("ENTRYPOINT {rest} is not the exec form"))?;
            } else if let Some(rest) = l.strip_prefix("USER ") {
                def.user = rest.trim().to_owned();
            }
        }
        ensure!(
            def.binary_path.starts_with('/'),
            "no COPY --from=build in the final stage"
        );
        ensure!(
            !def.entrypoint.is_empty(),
            "no ENTRYPOINT in the final stage"
        );
        Ok(def)
    }

    /// Whether the image runs as root.
    pub fn runs_as_root(&self) -> bool {
        matches!(self.user.as_str(), "" | "0" | "root" | "0:0")
    }
}

/// Builds `package`'s binary `bin` fully static (`-C
/// target-feature=+crt-static`, [`STATIC_TARGET`]) with the workspace's
/// `min-size` profile (stripped), into the target dir of this test binary;
/// returns its path. A no-op when up to date. The time is a build's, left
/// out of the test's budget.
///
/// # Errors
///
/// The build fails.
pub fn static_binary(package: &str, bin: &str) -> Result<PathBuf> {
    let mut paths = static_binaries(&[(package, bin)])?;
    paths.pop().context("no binary built")
}

/// [`static_binary`] for several `(package, bin)` pairs in one cargo
/// invocation; the paths in the same order. Their dependencies are built
/// once, with the features the packages need together (built one by one,
/// a dependency whose features differ between them is built twice).
///
/// # Errors
///
/// The build fails.
pub fn static_binaries(bins: &[(&str, &str)]) -> Result<Vec<PathBuf>> {
    let _building = BuildTimer(std::time::Instant::now());
    let profile = crate::profile_dir()?;
    let target_dir = profile.parent().context("no target dir")?.to_path_buf();
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace_root())
        .env("CARGO_TARGET_DIR", &target_dir)
        .env("RUSTFLAGS", "-C target-feature=+crt-static")
        .args(["build", "--profile", "min-size", "--target", STATIC_TARGET]);
    for (package, bin) in bins {
        cmd.args(["-p", package, "--bin", bin]);
    }
    eprintln!("[e2e] static build of {bins:?}: {cmd:?}");
    let out = run_with_deadline(cmd, &std::env::temp_dir(), Duration::from_secs(1800))?;
    if !out.status.success() {
        bail!("static build of {bins:?} failed:\n{}", out.stderr);
    }
    bins.iter()
        .map(|(_, bin)| {
            let path = target_dir.join(STATIC_TARGET).join("min-size").join(bin);
            ensure!(path.is_file(), "{} missing after the build", path.display());
            Ok(path)
        })
        .collect()
}

fn sha256(path: &Path) -> Result<String> {
    let out = Command::new("sha256sum").arg(path).output()?;
    ensure!(out.status.success(), "sha256sum {} failed", path.display());
    let text = String::from_utf8_lossy(&out.stdout);
    Ok(text
        .split_whitespace()
        .next()
        .unwrap_or_default()
        .to_owned())
}

/// Writes a blob into `layout/blobs/sha256`; returns its digest and size.
fn blob(layout: &Path, data: &[u8]) -> Result<(String, usize)> {
    let tmp = layout.join("blob.tmp");
    fs::write(&tmp, data)?;
    let digest = sha256(&tmp)?;
    fs::rename(&tmp, layout.join("blobs/sha256").join(&digest))?;
    Ok((format!("sha256:{digest}"), data.len()))
}

/// Reproducible tar of `dir`'s contents into `out`.
fn tar(dir: &Path, out: &Path) -> Result<()> {
    let st = Command::new("tar")
        .args([
            "--sort=name",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "--mtime=@0",
            "-C",
        ])
        .arg(dir)
        .arg("-cf")
        .arg(out)
        .arg(".")
        .status()?;
    ensure!(st.success(), "tar of {} failed", dir.display());
    Ok(())
}

/// Packs `binary` into a one-layer OCI image `reference` as `def` lays it
/// out (binary at `def.binary_path`, mode 0755; `def.entrypoint`,
/// `def.user`), written as an image layout tarball at `out` (`scratch` is
/// a work dir of the caller's).
///
/// # Errors
///
/// File system or tool failures.
pub fn pack_image(
    binary: &Path,
    def: &ImageDefinition,
    reference: &str,
    scratch: &Path,
    out: &Path,
) -> Result<()> {
    use std::os::unix::fs::PermissionsExt as _;
    let rootfs = scratch.join("rootfs");
    let layout = scratch.join("layout");
    let dst = rootfs.join(def.binary_path.trim_start_matches('/'));
    fs::create_dir_all(dst.parent().context("binary path has no parent")?)?;
    fs::create_dir_all(layout.join("blobs/sha256"))?;
    fs::copy(binary, &dst)?;
    fs::set_permissions(&dst, fs::Permissions::from_mode(0o755))?;
    let layer = scratch.join("layer.tar");
    tar(&rootfs, &layer)?;
    let (layer_digest, layer_size) = blob(&layout, &fs::read(&layer)?)?;
    let config = json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Entrypoint": def.entrypoint, "User": def.user, "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        "history": [{"created_by": "nri-e2e-tests oci::pack_image"}]
    });
    let (config_digest, config_size) = blob(&layout, &serde_json::to_vec(&config)?)?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                    "digest": layer_digest, "size": layer_size}]
    });
    let (manifest_digest, manifest_size) = blob(&layout, &serde_json::to_vec(&manifest)?)?;
    let tag = reference.rsplit(':').next().unwrap_or("latest");
    let index = json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest_digest, "size": manifest_size,
            "platform": {"architecture": "amd64", "os": "linux"},
            "annotations": {"io.containerd.image.name": reference,
                            "org.opencontainers.image.ref.name": tag}
        }]
    });
    fs::write(layout.join("index.json"), serde_json::to_vec(&index)?)?;
    fs::write(
        layout.join("oci-layout"),
        br#"{"imageLayoutVersion":"1.0.0"}"#,
    )?;
    tar(&layout, out)
}
