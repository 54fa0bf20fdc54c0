//! The JSON a runtime writes to `config.json` for a [`Spec`].

use oci_spec::runtime::Spec;
use serde_json::Value;

use crate::Error;

/// The names oci-spec 0.10 writes for two scheduler flags, and the names of
/// the OCI runtime spec (`process.scheduler.flags`, runtime-spec 1.2) that
/// runtimes read.
pub(crate) const MISSPELLED_SCHED_FLAGS: [(&str, &str); 2] = [
    ("SCHED_RESET_ON_FORK", "SCHED_FLAG_RESET_ON_FORK"),
    ("SCHED_FLAG_D_L_OVERRUN", "SCHED_FLAG_DL_OVERRUN"),
];

/// Serializes `spec` as an OCI runtime reads it, correcting what oci-spec
/// 0.10 writes wrongly or unstably:
///
/// * the scheduler flags `SCHED_FLAG_RESET_ON_FORK` and
///   `SCHED_FLAG_DL_OVERRUN`, which oci-spec spells `SCHED_RESET_ON_FORK`
///   and `SCHED_FLAG_D_L_OVERRUN`;
/// * the capability sets (`process.capabilities.*`), which oci-spec keeps in
///   hash sets and so writes in a different order each time: they are
///   sorted.
///
/// Use this (not `serde_json::to_value`) for a spec that carries a
/// scheduler adjustment.
///
/// # Errors
///
/// [`Error::Json`] if the spec cannot be serialized.
///
/// ```
/// use nri_api::api::{ContainerAdjustment, LinuxContainerAdjustment, LinuxScheduler,
///     LinuxSchedulerFlag, LinuxSchedulerPolicy};
///
/// let mut spec = oci_spec::runtime::Spec::default();
/// let adjust = ContainerAdjustment {
///     linux: Some(LinuxContainerAdjustment {
///         scheduler: Some(LinuxScheduler {
///             policy: LinuxSchedulerPolicy::SchedFifo as i32,
///             priority: 10,
///             flags: vec![LinuxSchedulerFlag::SchedFlagResetOnFork as i32],
///             ..Default::default()
///         }),
///         ..Default::default()
///     }),
///     ..Default::default()
/// };
/// nri_oci::Applier::builder().build().apply_adjustment(&mut spec, &adjust)?;
/// let json = nri_oci::spec_json(&spec)?;
/// assert_eq!(json["process"]["scheduler"]["flags"][0], "SCHED_FLAG_RESET_ON_FORK");
/// # Ok::<(), nri_oci::Error>(())
/// ```
pub fn spec_json(spec: &Spec) -> Result<Value, Error> {
    let mut v = serde_json::to_value(spec).map_err(|source| Error::Json { source })?;
    if let Some(process) = v.get_mut("process") {
        if let Some(Value::Array(flags)) = process.pointer_mut("/scheduler/flags") {
            for f in flags.iter_mut() {
                let fixed = MISSPELLED_SCHED_FLAGS
                    .iter()
                    .find(|(bad, _)| f.as_str() == Some(bad));
                if let Some((_, good)) = fixed {
                    *f = Value::String((*good).to_owned());
                }
            }
        }
        if let Some(Value::Object(caps)) = process.get_mut("capabilities") {
            for set in caps.values_mut() {
                if let Value::Array(items) = set {
                    items.sort_by(|a, b| a.as_str().cmp(&b.as_str()));
                }
            }
        }
    }
    Ok(v)
}
