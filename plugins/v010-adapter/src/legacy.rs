//! NRI v0.1.0 JSON types, with the field names and omission rules of
//! upstream's (deprecated) `types/v1`.

use std::collections::BTreeMap;

use nri_plugin::api::{LinuxResources, OptionalBool, OptionalInt64, OptionalUInt64};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

use crate::RawJson;

/// One plugin of the configuration list.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PluginConf {
    /// The plugin's executable name.
    #[serde(rename = "type")]
    pub r#type: String,
    /// Its configuration, passed verbatim in the request's `conf`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf: Option<RawJson>,
}

/// The configuration list (`/etc/nri/conf.json`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ConfigList {
    /// Version, copied into every request.
    #[serde(default)]
    pub version: String,
    /// Plugins, invoked in this order.
    #[serde(default)]
    pub plugins: Vec<PluginConf>,
}

/// The state of a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum State {
    /// Create the resources of the pod or container.
    Create,
    /// Delete them.
    Delete,
    /// Update (never sent by the adapter).
    Update,
    /// Pause (never sent by the adapter).
    Pause,
    /// Resume (never sent by the adapter).
    Resume,
}

/// The spec subset sent to plugins.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Spec {
    /// OCI `LinuxResources` as JSON (`null` when there are none).
    pub resources: Value,
    /// Namespace type to path.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub namespaces: BTreeMap<String, String>,
    /// The cgroups path.
    #[serde(
        rename = "cgroupsPath",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub cgroups_path: String,
    /// Annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// A request to one plugin.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Request {
    /// The plugin's configuration from the list.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conf: Option<RawJson>,
    /// The list's version.
    pub version: String,
    /// What happens.
    pub state: State,
    /// Pod or container id.
    pub id: String,
    /// The pod's id (equal to `id` for a pod request).
    #[serde(
        rename = "sandboxID",
        default,
        skip_serializing_if = "String::is_empty"
    )]
    pub sandbox_id: String,
    /// Pid (left out when 0).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub pid: i64,
    /// The spec subset.
    pub spec: Option<Spec>,
    /// The pod's labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub labels: BTreeMap<String, String>,
    /// Results of the plugins invoked before this one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub results: Vec<PluginResult>,
}

fn is_zero(v: &i64) -> bool {
    *v == 0
}

/// A plugin's result.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PluginResult {
    /// The plugin's name.
    #[serde(default)]
    pub plugin: String,
    /// Its version.
    #[serde(default)]
    pub version: String,
    /// Non-empty: the plugin failed with this message.
    #[serde(default)]
    pub error: String,
    /// What the plugin did.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metadata: BTreeMap<String, String>,
}

fn i64v(v: Option<&OptionalInt64>) -> Option<Value> {
    v.map(|v| json!(v.value))
}
fn u64v(v: Option<&OptionalUInt64>) -> Option<Value> {
    v.map(|v| json!(v.value))
}
fn boolv(v: Option<&OptionalBool>) -> Option<Value> {
    v.map(|v| json!(v.value))
}

fn object(fields: Vec<(&str, Option<Value>)>) -> Value {
    let mut m = Map::new();
    for (k, v) in fields {
        if let Some(v) = v {
            m.insert(k.to_owned(), v);
        }
    }
    Value::Object(m)
}

/// NRI resources as OCI `LinuxResources` JSON, the way upstream's adapter
/// (NRI v0.10.0 `ToOCI`, runtime-spec 1.2) produces them: `null` for none;
/// `memory` and `cpu` always present; unset optional values left out.
///
/// # Errors
///
/// Never in practice (plain JSON values).
pub fn oci_resources(r: Option<&LinuxResources>) -> Result<Value, serde_json::Error> {
    let Some(r) = r else {
        return Ok(Value::Null);
    };
    let mut out = Map::new();
    if !r.devices.is_empty() {
        let devices: Vec<Value> = r
            .devices
            .iter()
            .map(|d| {
                object(vec![
                    ("allow", Some(json!(d.allow))),
                    ("type", (!d.r#type.is_empty()).then(|| json!(d.r#type))),
                    ("major", i64v(d.major.as_ref())),
                    ("minor", i64v(d.minor.as_ref())),
                    ("access", (!d.access.is_empty()).then(|| json!(d.access))),
                ])
            })
            .collect();
        out.insert("devices".into(), Value::Array(devices));
    }
    let m = r.memory.unwrap_or_default();
    out.insert(
        "memory".into(),
        object(vec![
            ("limit", i64v(m.limit.as_ref())),
            ("reservation", i64v(m.reservation.as_ref())),
            ("swap", i64v(m.swap.as_ref())),
            ("kernel", i64v(m.kernel.as_ref())),
            ("kernelTCP", i64v(m.kernel_tcp.as_ref())),
            ("swappiness", u64v(m.swappiness.as_ref())),
            ("disableOOMKiller", boolv(m.disable_oom_killer.as_ref())),
            ("useHierarchy", boolv(m.use_hierarchy.as_ref())),
        ]),
    );
    let c = r.cpu.clone().unwrap_or_default();
    out.insert(
        "cpu".into(),
        object(vec![
            ("shares", u64v(c.shares.as_ref())),
            ("quota", i64v(c.quota.as_ref())),
            ("period", u64v(c.period.as_ref())),
            ("realtimeRuntime", i64v(c.realtime_runtime.as_ref())),
            ("realtimePeriod", u64v(c.realtime_period.as_ref())),
            ("cpus", (!c.cpus.is_empty()).then(|| json!(c.cpus))),
            ("mems", (!c.mems.is_empty()).then(|| json!(c.mems))),
        ]),
    );
    if let Some(p) = &r.pids {
        out.insert("pids".into(), json!({ "limit": p.limit }));
    }
    if !r.hugepage_limits.is_empty() {
        let h: Vec<Value> = r
            .hugepage_limits
            .iter()
            .map(|h| json!({"pageSize": h.page_size, "limit": h.limit}))
            .collect();
        out.insert("hugepageLimits".into(), Value::Array(h));
    }
    if !r.unified.is_empty() {
        out.insert("unified".into(), serde_json::to_value(&r.unified)?);
    }
    Ok(Value::Object(out))
}
