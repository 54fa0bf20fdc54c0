//! Validation of merged container adjustments.
//!
//! After every plugin has adjusted a new container, validators (plugins
//! subscribed to ValidateContainerAdjustment, and built-in validators such as
//! [`DefaultValidator`]) see the **merged** result and its owners, built by
//! [`build_request`]. Any rejection fails the container creation.

mod default;
mod presence;
mod roles;
mod yaml;

use std::borrow::Borrow;

use nri_api::api::{
    Container, ContainerUpdate, OwningPlugins, PodSandbox, ValidateContainerAdjustmentRequest,
    ValidateContainerAdjustmentResponse,
};

use crate::error::Error;
use crate::{CreateResult, Participants, PluginId};

pub use default::{DefaultValidator, DefaultValidatorConfig};
pub use presence::{is_adjusted, is_updated};
pub use roles::DefaultValidatorRole;
pub use yaml::parse_string_list;

/// Pod annotation (possibly scoped, see [`effective_annotation`]) listing
/// extra plugins required for a pod or container. Its value is a YAML (or
/// JSON) list of plugin names. Mirrors upstream's
/// `plugin.RequiredPluginsAnnotation`.
pub const REQUIRED_PLUGINS_ANNOTATION: &str = "required-plugins.noderesource.dev";

/// The annotation key upstream's documentation uses as an example for
/// `tolerateMissingPluginsAnnotation` (upstream has no default; neither do
/// we: set it in the configuration to enable the toleration).
pub const EXAMPLE_TOLERATE_MISSING_PLUGINS_ANNOTATION: &str =
    "tolerate-missing-nri-plugins.noderesource.dev";

/// Reason used when a validator rejects without giving one (as upstream).
pub const UNKNOWN_REJECTION_REASON: &str = "unknown rejection reason";

/// A validator's refusal of a merged adjustment.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
#[non_exhaustive]
pub struct Rejection {
    /// Human-readable reason (sent on the wire).
    pub reason: String,
    /// Plugins (`NN-name`) responsible for the offending change, or the
    /// missing required plugins; empty when not attributable.
    pub plugins: Vec<String>,
}

impl Rejection {
    /// A rejection with a reason and the plugins to blame.
    pub fn new(reason: impl Into<String>, plugins: Vec<String>) -> Self {
        Self {
            reason: reason.into(),
            plugins,
        }
    }

    /// The wire response carrying this rejection.
    pub fn to_response(&self) -> ValidateContainerAdjustmentResponse {
        ValidateContainerAdjustmentResponse {
            reject: true,
            reason: self.reason.clone(),
        }
    }

    /// The crate error for a rejection by `validator`.
    pub fn into_error(self, validator: &PluginId) -> Error {
        Error::ValidationRejected {
            plugin: validator.to_string(),
            reason: self.reason,
        }
    }
}

/// Something that validates merged container adjustments in process (a
/// built-in validator). Validators running as plugins are called over the
/// wire instead; see [`check_response`].
pub trait Validator: Send + Sync {
    /// Accepts or rejects the merged adjustment in `request`.
    fn validate(&self, request: &ValidateContainerAdjustmentRequest) -> Result<(), Rejection>;

    /// As [`validate`](Self::validate), knowing who the plugins taking
    /// part are: `participants` gives, for each `NN-name` of the request's
    /// owners and plugins, the plugin's identity (uid, gid, pid,
    /// executable, pod) and the role of its grant. The runtime library
    /// calls this one; the default calls [`validate`](Self::validate).
    fn validate_with(
        &self,
        request: &ValidateContainerAdjustmentRequest,
        participants: Participants<'_>,
    ) -> Result<(), Rejection> {
        let _ = participants;
        self.validate(request)
    }

    /// Accepts or rejects container updates made by plugins outside of a
    /// container's creation: answers to `UpdateContainer`, `StopContainer`
    /// and `Synchronize`, and unsolicited `UpdateContainers`. (Updates of
    /// other containers in a `CreateContainer` answer are in the
    /// [`validate`](Self::validate) request.) Only in-process validators
    /// see them: the protocol has no message for it. The default accepts
    /// everything.
    fn validate_updates(&self, request: &UpdateValidation<'_>) -> Result<(), Rejection> {
        let _ = request;
        Ok(())
    }
}

/// Container updates for [`Validator::validate_updates`].
#[derive(Debug, Clone, Copy)]
#[non_exhaustive]
pub struct UpdateValidation<'a> {
    /// Where they come from: `UpdateContainer`, `StopContainer`,
    /// `Synchronize` or `UpdateContainers` (unsolicited).
    pub operation: &'a str,
    /// The updates, every field of which a plugin set.
    pub updates: &'a [ContainerUpdate],
    /// The owner of each field, when the updates were merged from several
    /// plugins. It may name containers without an entry in `updates`: the
    /// target of an `UpdateContainer`, whose update also carries the
    /// resources the runtime itself asked for.
    pub owners: Option<&'a OwningPlugins>,
    /// The one plugin that sent them all (`Synchronize`,
    /// `UpdateContainers`).
    pub plugin: Option<&'a str>,
    /// Who the plugins named in `owners` and `plugin` are (identity and
    /// role); empty when the caller does not know.
    pub participants: Participants<'a>,
}

impl<'a> UpdateValidation<'a> {
    /// Updates from `operation`, without owners or sender.
    pub fn new(operation: &'a str, updates: &'a [ContainerUpdate]) -> Self {
        Self {
            operation,
            updates,
            owners: None,
            plugin: None,
            participants: Participants::none(),
        }
    }

    /// With the owners of the merged fields.
    #[must_use]
    pub fn with_owners(mut self, owners: &'a OwningPlugins) -> Self {
        self.owners = Some(owners);
        self
    }

    /// With the plugin (`NN-name`) that sent every update.
    #[must_use]
    pub fn with_plugin(mut self, plugin: &'a str) -> Self {
        self.plugin = Some(plugin);
        self
    }

    /// With who the plugins are.
    #[must_use]
    pub fn with_participants(mut self, participants: Participants<'a>) -> Self {
        self.participants = participants;
        self
    }
}

/// Converts a validator plugin's response into a result:
/// `reject == true` is [`Error::ValidationRejected`] (with
/// [`UNKNOWN_REJECTION_REASON`] if the reason is empty).
pub fn check_response(
    validator: &PluginId,
    response: &ValidateContainerAdjustmentResponse,
) -> Result<(), Error> {
    if !response.reject {
        return Ok(());
    }
    let reason = if response.reason.is_empty() {
        UNKNOWN_REJECTION_REASON.to_owned()
    } else {
        response.reason.clone()
    };
    Err(Error::ValidationRejected {
        plugin: validator.to_string(),
        reason,
    })
}

/// Builds the validation request from a finished [`CreateResult`]: the
/// pristine pod and container, the merged adjustment and updates, the owners
/// and the plugins that took part ([`CreateResult::plugins`]).
pub fn build_request<P, C>(result: &CreateResult<P, C>) -> ValidateContainerAdjustmentRequest
where
    P: Borrow<PodSandbox>,
    C: Borrow<Container>,
{
    ValidateContainerAdjustmentRequest {
        pod: Some(result.pod().clone()),
        container: Some(result.pristine().clone()),
        adjust: Some(result.adjustment().clone()),
        update: result.updates().to_vec(),
        owners: Some(result.owners().to_wire()),
        plugins: result.plugins().iter().map(PluginId::to_instance).collect(),
    }
}

/// Looks up a pod annotation that applies to `container` (by name), with
/// upstream's scoping: `<key>/container.<container>` first, then
/// `<key>/pod`, then `<key>`.
pub fn effective_annotation<'a>(
    pod: Option<&'a PodSandbox>,
    key: &str,
    container: &str,
) -> Option<&'a str> {
    let annotations = &pod?.annotations;
    [
        format!("{key}/container.{container}"),
        format!("{key}/pod"),
        key.to_owned(),
    ]
    .iter()
    .find_map(|k| annotations.get(k).map(String::as_str))
}

/// Parses a boolean like Go's `strconv.ParseBool` (`1 t T TRUE true True`,
/// `0 f F FALSE false False`), which upstream uses for annotation values.
pub fn parse_bool(s: &str) -> Option<bool> {
    match s {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}
