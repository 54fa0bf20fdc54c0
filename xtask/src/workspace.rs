//! The workspace's packages as `cargo metadata` describes them: which are
//! published, their versions, library targets, docs.rs features and
//! dependencies on each other.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::Value;

/// One package of the workspace.
#[derive(Debug, Clone)]
pub struct Package {
    pub name: String,
    pub version: String,
    /// `publish = false` not set.
    pub published: bool,
    pub manifest_dir: PathBuf,
    /// The library target's crate name (`nri_plugin`), if it has one.
    pub lib: Option<String>,
    /// `[package.metadata.docs.rs] features`.
    pub docs_features: Vec<String>,
    /// Dependencies on other workspace members (normal and build only):
    /// (name, version requirement).
    pub internal_deps: Vec<(String, String)>,
    pub meta: Value,
}

/// The workspace: its packages (members only) and its target directory.
pub struct Workspace {
    pub packages: Vec<Package>,
    pub target_dir: PathBuf,
}

impl Workspace {
    /// Reads `cargo metadata --no-deps` of the repository.
    pub fn load(root: &std::path::Path) -> Result<Workspace> {
        let out = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args([
                "metadata",
                "--format-version",
                "1",
                "--no-deps",
                "--offline",
            ])
            .current_dir(root)
            .output()
            .context("running cargo metadata")?;
        if !out.status.success() {
            bail!(
                "cargo metadata failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let meta: Value = serde_json::from_slice(&out.stdout).context("parsing cargo metadata")?;
        let members: Vec<String> = meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        let packages = meta["packages"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| package(p, &members))
            .collect::<Result<Vec<_>>>()?;
        let target_dir = PathBuf::from(
            meta["target_directory"]
                .as_str()
                .context("target_directory")?,
        );
        Ok(Workspace {
            packages,
            target_dir,
        })
    }

    /// The published packages, in an order in which each comes after the
    /// workspace members it depends on (the order of `cargo publish`).
    pub fn publish_order(&self) -> Result<Vec<&Package>> {
        let mut published: Vec<&Package> = self.packages.iter().filter(|p| p.published).collect();
        published.sort_by(|a, b| a.name.cmp(&b.name));
        let mut order: Vec<&Package> = Vec::new();
        while order.len() < published.len() {
            let next = published.iter().find(|p| {
                !order.iter().any(|o| o.name == p.name)
                    && p.internal_deps
                        .iter()
                        .all(|(d, _)| order.iter().any(|o| &o.name == d) || !self.is_published(d))
            });
            match next {
                Some(p) => order.push(p),
                None => bail!("the published crates depend on each other in a cycle"),
            }
        }
        Ok(order)
    }

    fn is_published(&self, name: &str) -> bool {
        self.packages.iter().any(|p| p.name == name && p.published)
    }
}

fn package(p: &Value, members: &[String]) -> Result<Package> {
    let name = p["name"].as_str().context("package name")?.to_owned();
    let manifest = PathBuf::from(p["manifest_path"].as_str().context("manifest_path")?);
    let lib = p["targets"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|t| {
            t["kind"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|k| matches!(k.as_str(), Some("lib" | "proc-macro" | "rlib")))
        })
        .and_then(|t| t["name"].as_str())
        .map(|n| n.replace('-', "_"));
    let docs_features = p["metadata"]["docs"]["rs"]["features"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_owned))
        .collect();
    let internal_deps = p["dependencies"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|d| d["kind"].as_str() != Some("dev"))
        .filter_map(|d| {
            let n = d["name"].as_str()?;
            members
                .iter()
                .any(|m| m == n)
                .then(|| (n.to_owned(), d["req"].as_str().unwrap_or("*").to_owned()))
        })
        .collect();
    Ok(Package {
        version: p["version"].as_str().context("version")?.to_owned(),
        // `publish = false` is an empty list of registries.
        published: !matches!(&p["publish"], Value::Array(a) if a.is_empty()),
        manifest_dir: manifest.parent().context("manifest dir")?.to_path_buf(),
        lib,
        docs_features,
        internal_deps,
        meta: p.clone(),
        name,
    })
}

/// Whether `new` is a semver-incompatible successor of `old` (the bump a
/// breaking change needs: the first non-zero component grows).
pub fn is_breaking_bump(old: &str, new: &str) -> bool {
    let parse = |v: &str| -> Vec<u64> {
        v.split(['.', '-', '+'])
            .take(3)
            .map(|x| x.parse().unwrap_or(0))
            .collect()
    };
    let (o, n) = (parse(old), parse(new));
    let (o0, o1) = (
        o.first().copied().unwrap_or(0),
        o.get(1).copied().unwrap_or(0),
    );
    let (n0, n1) = (
        n.first().copied().unwrap_or(0),
        n.get(1).copied().unwrap_or(0),
    );
    if o0 == 0 {
        n0 > 0 || (o1 == 0 && n > o) || n1 > o1
    } else {
        n0 > o0
    }
}

/// The next semver-incompatible version after `v` (0.1.3 -> 0.2.0, 1.4.0 -> 2.0.0).
pub fn next_breaking(v: &str) -> String {
    let p: Vec<u64> = v
        .split('.')
        .take(3)
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    match p.as_slice() {
        [0, 0, z] => format!("0.0.{}", z + 1),
        [0, y, _] => format!("0.{}.0", y + 1),
        [x, ..] => format!("{}.0.0", x + 1),
        [] => "0.1.0".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn breaking_bumps() {
        assert!(is_breaking_bump("0.1.0", "0.2.0"));
        assert!(is_breaking_bump("0.1.4", "1.0.0"));
        assert!(!is_breaking_bump("0.1.0", "0.1.1"));
        assert!(!is_breaking_bump("0.1.0", "0.1.0"));
        assert!(is_breaking_bump("1.2.0", "2.0.0"));
        assert!(!is_breaking_bump("1.2.0", "1.3.0"));
        assert!(is_breaking_bump("0.0.1", "0.0.2"));
        assert_eq!(next_breaking("0.1.0"), "0.2.0");
        assert_eq!(next_breaking("0.1.7"), "0.2.0");
        assert_eq!(next_breaking("1.4.2"), "2.0.0");
        assert_eq!(next_breaking("0.0.3"), "0.0.4");
    }
}
