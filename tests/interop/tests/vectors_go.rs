//! Protobuf vectors of the real Go NRI API types (`nri-vectors gen`),
//! decoded and re-encoded by nri-api's prost types, then checked by Go
//! (`nri-vectors check`).
//!
//! Encodings may differ in one known way: prost leaves a map entry's key or
//! value out when it is the default (empty string, empty message, 0), Go
//! writes it. The test computes, from the schema, which vectors contain
//! such entries, requires exactly those to differ in bytes, and requires
//! every encoding to be byte-identical to Go's once those default key/value
//! fields are removed from Go's map entries. That also catches fields prost
//! dropped as unknown (wrong number or wire type), which plain equality of
//! the decoded messages could not.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail, ensure};
use nri_interop_tests::go_peer;
use prost::Message;
use prost_types::field_descriptor_proto::Type;
use prost_types::{DescriptorProto, FileDescriptorSet};
use serde_json::Value;

const PACKAGE: &str = "nri.pkg.api.v1alpha1";

/// Decodes `bytes` as the message called `name`, checks that re-encoding
/// and decoding again gives the same message, and returns the re-encoding.
/// `None` if no type has that name.
fn roundtrip(name: &str, bytes: &[u8]) -> Option<Result<Vec<u8>>> {
    macro_rules! dispatch {
        ($($ty:path),* $(,)?) => {
            $(
                if name == <$ty as prost::Name>::NAME {
                    return Some(roundtrip_as::<$ty>(bytes));
                }
            )*
        };
    }
    nri_api::for_each_message!(dispatch);
    None
}

fn roundtrip_as<T: Message + Default + PartialEq + std::fmt::Debug>(
    bytes: &[u8],
) -> Result<Vec<u8>> {
    let msg = T::decode(bytes).context("decode Go vector")?;
    let out = msg.encode_to_vec();
    let again = T::decode(out.as_slice()).context("decode own encoding")?;
    ensure!(again == msg, "decode(encode(m)) != m");
    ensure!(out.len() == msg.encoded_len(), "encoded_len disagrees");
    Ok(out)
}

fn all_names() -> Vec<&'static str> {
    macro_rules! names {
        ($($ty:path),* $(,)?) => {
            vec![$(<$ty as prost::Name>::NAME),*]
        };
    }
    nri_api::for_each_message!(names)
}

// --- schema-driven wire walker -------------------------------------------

struct Schema {
    messages: HashMap<String, DescriptorProto>,
}

impl Schema {
    fn load() -> Result<Schema> {
        let set = FileDescriptorSet::decode(nri_api::FILE_DESCRIPTOR_SET)?;
        let mut messages = HashMap::new();
        fn add(prefix: &str, d: &DescriptorProto, out: &mut HashMap<String, DescriptorProto>) {
            let full = format!("{prefix}.{}", d.name());
            for n in &d.nested_type {
                add(&full, n, out);
            }
            out.insert(full, d.clone());
        }
        for f in &set.file {
            for d in &f.message_type {
                add(f.package(), d, &mut messages);
            }
        }
        Ok(Schema { messages })
    }

    fn message(&self, full: &str) -> Result<&DescriptorProto> {
        self.messages
            .get(full.trim_start_matches('.'))
            .with_context(|| format!("no message {full} in the schema"))
    }

    /// Re-emits `buf` (a `full` message) with default keys/values removed
    /// from every map entry, recursively. `dropped` counts removed fields.
    fn normalize(&self, full: &str, mut buf: &[u8], dropped: &mut usize) -> Result<Vec<u8>> {
        let desc = self.message(full)?;
        let is_entry = desc.options.as_ref().is_some_and(|o| o.map_entry());
        let mut out = Vec::with_capacity(buf.len());
        while !buf.is_empty() {
            let key = prost::encoding::decode_varint(&mut buf)?;
            let (num, wt) = (key >> 3, key & 7);
            let field = desc
                .field
                .iter()
                .find(|f| u64::try_from(f.number()).ok() == Some(num))
                .with_context(|| format!("{full}: field {num} not in the schema"))?;
            let (value, is_default): (Vec<u8>, bool) = match wt {
                0 => {
                    let v = prost::encoding::decode_varint(&mut buf)?;
                    let mut e = Vec::new();
                    prost::encoding::encode_varint(v, &mut e);
                    (e, v == 0)
                }
                1 | 5 => {
                    let n = if wt == 1 { 8 } else { 4 };
                    ensure!(buf.len() >= n, "{full}: truncated fixed field");
                    let (v, rest) = buf.split_at(n);
                    buf = rest;
                    (v.to_vec(), v.iter().all(|b| *b == 0))
                }
                2 => {
                    let len = usize::try_from(prost::encoding::decode_varint(&mut buf)?)?;
                    ensure!(buf.len() >= len, "{full}: truncated field {num}");
                    let (v, rest) = buf.split_at(len);
                    buf = rest;
                    let inner = if field.r#type() == Type::Message {
                        self.normalize(field.type_name(), v, dropped)?
                    } else {
                        v.to_vec()
                    };
                    let mut e = Vec::new();
                    prost::encoding::encode_varint(inner.len() as u64, &mut e);
                    e.extend_from_slice(&inner);
                    (e, len == 0)
                }
                _ => bail!("{full}: unexpected wire type {wt}"),
            };
            if is_entry && is_default {
                *dropped += 1;
                continue;
            }
            prost::encoding::encode_varint(key, &mut out);
            out.extend_from_slice(&value);
        }
        Ok(out)
    }
}

// --- the test ---------------------------------------------------------------

fn run_vectors(bin: &Path, args: &[&str]) -> Result<std::process::Output> {
    Command::new(bin)
        .args(args)
        .output()
        .with_context(|| format!("run {} {args:?}", bin.display()))
}

fn check_json(bin: &Path, dir: &Path) -> Result<(Value, Option<i32>)> {
    let dir_s = dir.to_str().context("temp dir not UTF-8")?;
    let out = run_vectors(bin, &["check", dir_s])?;
    let v: Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "check output not JSON: {} / {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    Ok((v, out.status.code()))
}

fn str_set(v: &Value) -> BTreeSet<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
#[allow(clippy::too_many_lines)]
fn go_vectors_roundtrip() -> Result<()> {
    let Some(bin) = go_peer("nri-vectors") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let dir_s = dir.path().to_str().context("temp dir not UTF-8")?;
    let out = run_vectors(&bin, &["gen", dir_s])?;
    ensure!(out.status.success(), "gen failed: {out:?}");

    let index: Value = serde_json::from_slice(&std::fs::read(dir.path().join("index.json"))?)?;
    ensure!(index["package"] == PACKAGE, "package {}", index["package"]);
    let entries = index["messages"].as_array().context("index.messages")?;
    ensure!(
        index["count"] == nri_api::MESSAGE_COUNT && entries.len() == nri_api::MESSAGE_COUNT,
        "Go has {} vectors, nri-api {} messages",
        entries.len(),
        nri_api::MESSAGE_COUNT
    );

    let schema = Schema::load()?;
    let mut seen = BTreeSet::new();
    // name -> map-entry fields Go wrote with a default value
    let mut default_map_parts: BTreeMap<String, usize> = BTreeMap::new();
    let mut failures = Vec::new();
    for e in entries {
        let name = e["name"].as_str().context("name")?;
        let file = e["file"].as_str().context("file")?;
        ensure!(
            e["full_name"] == format!("{PACKAGE}.{name}"),
            "{name}: full name {}",
            e["full_name"]
        );
        let go_bytes = std::fs::read(dir.path().join(file))?;
        let rs = match roundtrip(name, &go_bytes) {
            None => bail!("no Rust type for Go message {name}"),
            Some(r) => r.with_context(|| name.to_owned())?,
        };
        std::fs::write(dir.path().join(format!("{name}.rs.bin")), &rs)?;
        seen.insert(name.to_owned());

        let mut dropped = 0;
        let normalized = schema.normalize(&format!("{PACKAGE}.{name}"), &go_bytes, &mut dropped)?;
        if dropped > 0 {
            default_map_parts.insert(name.to_owned(), dropped);
        }
        if normalized != rs {
            failures.push(format!(
                "{name}: Rust encoding ({} B) != Go's with default map parts removed ({} B, {} B raw)",
                rs.len(),
                normalized.len(),
                go_bytes.len()
            ));
        }
        if dropped == 0 && go_bytes != rs {
            failures.push(format!("{name}: bytes differ without a default map part"));
        }
    }
    let want: BTreeSet<String> = all_names().into_iter().map(str::to_owned).collect();
    ensure!(
        seen == want,
        "vectors vs types: missing vectors {:?}, unknown vectors {:?}",
        want.difference(&seen).collect::<Vec<_>>(),
        seen.difference(&want).collect::<Vec<_>>()
    );
    ensure!(
        failures.is_empty(),
        "encoding differences:\n{}",
        failures.join("\n")
    );

    let (check, code) = check_json(&bin, dir.path())?;
    ensure!(code == Some(0), "check exit {code:?}: {check}");
    ensure!(check["ok"] == true, "{check}");
    ensure!(check["total"] == nri_api::MESSAGE_COUNT, "{check}");
    ensure!(check["equal"] == nri_api::MESSAGE_COUNT, "{check}");
    for k in ["missing", "mismatched", "unknown_vectors"] {
        ensure!(
            check[k].as_array().is_some_and(Vec::is_empty),
            "{k} not empty: {check}"
        );
    }
    let expected_differ: BTreeSet<String> = default_map_parts.keys().cloned().collect();
    ensure!(
        str_set(&check["bytes_differ"]) == expected_differ,
        "Go says bytes differ for {}, expected exactly the vectors with default map parts {:?}",
        check["bytes_differ"],
        default_map_parts
    );
    ensure!(
        check["identical_bytes"] == nri_api::MESSAGE_COUNT - expected_differ.len(),
        "{check}"
    );
    eprintln!(
        "{} vectors equal in Go; {} byte-identical; differing only by default map entry parts: {:?}",
        nri_api::MESSAGE_COUNT,
        nri_api::MESSAGE_COUNT - expected_differ.len(),
        default_map_parts
    );
    Ok(())
}

/// The Go check must catch a field it does not know in our encoding (what a
/// wrong field number or wire type would produce): otherwise the test above
/// could not fail.
#[test]
fn go_check_rejects_unknown_fields() -> Result<()> {
    let Some(bin) = go_peer("nri-vectors") else {
        return Ok(());
    };
    let dir = tempfile::tempdir()?;
    let dir_s = dir.path().to_str().context("temp dir not UTF-8")?;
    let out = run_vectors(&bin, &["gen", dir_s])?;
    ensure!(out.status.success(), "gen failed: {out:?}");
    for name in all_names() {
        let go_bytes = std::fs::read(dir.path().join(format!("{name}.bin")))?;
        let mut rs = roundtrip(name, &go_bytes).context("type")??;
        if name == "Mount" {
            // field 999, varint 1: unknown to the schema
            prost::encoding::encode_key(999, prost::encoding::WireType::Varint, &mut rs);
            prost::encoding::encode_varint(1, &mut rs);
        }
        std::fs::write(dir.path().join(format!("{name}.rs.bin")), &rs)?;
    }
    let (check, code) = check_json(&bin, dir.path())?;
    ensure!(code == Some(1) && check["ok"] == false, "{check}");
    let mismatched: Vec<&Value> = check["mismatched"]
        .as_array()
        .context("mismatched")?
        .iter()
        .collect();
    ensure!(
        mismatched.len() == 1 && mismatched[0]["name"] == "Mount",
        "{check}"
    );
    Ok(())
}

/// The normalizer removes exactly what prost leaves out: a map entry
/// written Go-style with an empty key and an empty value normalizes to
/// prost's encoding of the same map.
#[test]
fn normalizer_matches_prost_map_entries() -> Result<()> {
    let schema = Schema::load()?;
    let full = format!("{PACKAGE}.PodSandbox");
    let labels = schema
        .message(&full)?
        .field
        .iter()
        .find(|f| f.name() == "labels")
        .context("PodSandbox.labels")?
        .number();
    let labels = u32::try_from(labels)?;

    let pod = nri_api::api::PodSandbox {
        labels: [
            ("k".to_owned(), String::new()),
            (String::new(), "v".to_owned()),
        ]
        .into_iter()
        .collect(),
        ..Default::default()
    };
    let prost_bytes = pod.encode_to_vec();

    // Go writes both key and value of every entry (sorted by key).
    let mut go_bytes = Vec::new();
    for (k, v) in [("", "v"), ("k", "")] {
        let mut entry = Vec::new();
        prost::encoding::string::encode(1, &k.to_owned(), &mut entry);
        prost::encoding::string::encode(2, &v.to_owned(), &mut entry);
        if k.is_empty() {
            ensure!(entry.starts_with(&[0x0a, 0x00]), "{entry:?}");
        }
        prost::encoding::bytes::encode(labels, &entry, &mut go_bytes);
    }
    ensure!(
        go_bytes != prost_bytes,
        "test vector does not exercise the difference"
    );
    let mut dropped = 0;
    let normalized = schema.normalize(&full, &go_bytes, &mut dropped)?;
    ensure!(dropped == 2, "dropped {dropped}");
    ensure!(
        normalized == prost_bytes,
        "{normalized:?} != {prost_bytes:?}"
    );
    Ok(())
}
