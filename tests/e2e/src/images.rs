//! The images of `deploy/images.yaml` the e2e tests deploy
//! ([`TEST_IMAGES`]), made offline as `deploy/Containerfile` lays them out:
//! each plugin's binary built static (the Containerfile's `min-size`
//! profile and `crt-static`; all of [`TEST_IMAGES`] in one cargo
//! invocation, [`crate::oci::static_binaries`], so their dependencies are
//! built once whichever test asks first), packed alone at the
//! Containerfile's path with its entrypoint and user
//! ([`crate::oci::pack_image`]) under the reference `images.yaml` names
//! (`<image>:<version>`), as an image-layout tarball for `ctr images
//! import`. Packed once per test process.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context as _, Result};
use serde_json::Value;

use crate::oci::{ImageDefinition, pack_image, static_binaries};
use crate::{profile_dir, workspace_root};

/// The `plugin` keys of `deploy/images.yaml` the tests build, together.
pub const TEST_IMAGES: [&str; 2] = ["nri-proxy", "ulimit-adjuster"];

/// One image of `deploy/images.yaml`, packed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeployImage {
    /// The `plugin` key (`nri-proxy`, `ulimit-adjuster`, ...).
    pub plugin: String,
    /// `<image>:<version>`, the reference the manifests name.
    pub reference: String,
    /// The image-layout tarball.
    pub tar: PathBuf,
    /// The static binary packed in it.
    pub binary: PathBuf,
}

/// Reads a YAML file of the repository into JSON values.
///
/// # Errors
///
/// The file cannot be read or is not YAML.
pub fn yaml_file(path: &Path) -> Result<Value> {
    let text = fs::read_to_string(path).with_context(|| path.display().to_string())?;
    serde_saphyr::from_str(&text).with_context(|| path.display().to_string())
}

/// The image of `plugin` (one of [`TEST_IMAGES`]); all of them are built
/// and packed on first use.
///
/// # Errors
///
/// Not in [`TEST_IMAGES`] or `images.yaml`, the build or the packing
/// failed.
pub fn deploy_image(plugin: &str) -> Result<DeployImage> {
    static PACKED: Mutex<Option<HashMap<String, DeployImage>>> = Mutex::new(None);
    // A test that waits here waits for another test's build of the
    // images: a build's time, left out of its budget like the build itself
    // (`static_binaries` counts that in the test that builds).
    let waiting = crate::BuildTimer(std::time::Instant::now());
    let mut packed = PACKED.lock().unwrap_or_else(|e| e.into_inner());
    drop(waiting);
    if packed.is_none() {
        *packed = Some(pack_all()?);
    }
    packed
        .as_ref()
        .and_then(|p| p.get(plugin))
        .cloned()
        .with_context(|| format!("{plugin} is not one of the test images {TEST_IMAGES:?}"))
}

fn pack_all() -> Result<HashMap<String, DeployImage>> {
    let deploy = workspace_root().join("deploy");
    let list = yaml_file(&deploy.join("images.yaml"))?;
    let version = list["version"]
        .as_str()
        .context("no version in images.yaml")?;
    let def = ImageDefinition::parse(&fs::read_to_string(deploy.join("Containerfile"))?)?;
    let mut entries = Vec::new();
    for plugin in TEST_IMAGES {
        let entry = list["images"]
            .as_array()
            .context("no images in images.yaml")?
            .iter()
            .find(|i| i["plugin"] == plugin)
            .with_context(|| format!("no {plugin} in deploy/images.yaml"))?;
        let field = |k: &str| -> Result<String> {
            entry[k]
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("no {k} for {plugin} in images.yaml"))
        };
        entries.push((plugin, field("package")?, field("binary")?, field("image")?));
    }
    let pairs: Vec<(&str, &str)> = entries
        .iter()
        .map(|(_, p, b, _)| (p.as_str(), b.as_str()))
        .collect();
    let bins = static_binaries(&pairs)?;
    let dir = profile_dir()?.join("nri-e2e-images");
    let mut out = HashMap::new();
    for ((plugin, _, _, image), bin) in entries.iter().zip(bins) {
        let reference = format!("{image}:{version}");
        let scratch = dir.join(format!("{plugin}.{}", std::process::id()));
        let _ = fs::remove_dir_all(&scratch);
        fs::create_dir_all(&scratch)?;
        let tar = dir.join(format!("{plugin}.tar"));
        let tmp = dir.join(format!("{plugin}.tar.{}", std::process::id()));
        pack_image(&bin, &def, &reference, &scratch, &tmp)?;
        fs::rename(&tmp, &tar)?;
        let _ = fs::remove_dir_all(&scratch);
        let img = DeployImage {
            plugin: (*plugin).to_owned(),
            reference,
            tar,
            binary: bin,
        };
        out.insert((*plugin).to_owned(), img);
    }
    Ok(out)
}
