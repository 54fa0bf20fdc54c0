//! The error type of this crate.

/// A boxed error returned by the runtime's callbacks (CDI injector, class
/// resolvers).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an adjustment or update could not be applied.
///
/// `field` always names the NRI field (dotted path inside a
/// `ContainerAdjustment` or `LinuxResources`) that carried the bad input.
/// When an [`Applier`](crate::Applier) returns an error, the spec it was
/// given is unchanged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A key (annotation, env var, sysctl, net device, ...) is empty, is a
    /// bare removal marker `-`, or contains a character it may not contain.
    #[error("{field}: invalid key {key:?}: {reason}")]
    InvalidKey {
        /// NRI field holding the key.
        field: &'static str,
        /// The key as received (with its removal marker, if any).
        key: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A required value is missing (e.g. a mount without destination, a hook
    /// without path, a seccomp rule without syscall names).
    #[error("{field}: missing {what}")]
    MissingField {
        /// NRI field (the entry) lacking the value.
        field: &'static str,
        /// What is missing.
        what: &'static str,
    },
    /// A string value is not one the OCI spec knows (namespace type,
    /// seccomp action/architecture/flag/operator, rlimit type, device type,
    /// cgroup access string).
    #[error("{field}: unknown value {value:?}")]
    UnknownValue {
        /// NRI field holding the value.
        field: &'static str,
        /// The value as received.
        value: String,
    },
    /// A protobuf enum field holds a number that is not a known variant.
    #[error("{field}: unknown enum value {value}")]
    UnknownEnum {
        /// NRI field holding the value.
        field: &'static str,
        /// The raw number.
        value: i32,
    },
    /// A number does not fit the OCI field (or the kernel's range).
    #[error("{field}: value {value} out of range: {reason}")]
    OutOfRange {
        /// NRI field holding the value.
        field: &'static str,
        /// The value as received, printed.
        value: String,
        /// The accepted range.
        reason: &'static str,
    },
    /// The value is valid for NRI and the OCI runtime spec, but `oci-spec`
    /// 0.10 cannot represent it faithfully, so applying it would write a
    /// wrong `config.json`.
    #[error("{field}: {value:?} cannot be expressed with oci-spec: {reason}")]
    Unsupported {
        /// NRI field holding the value.
        field: &'static str,
        /// The value as received.
        value: String,
        /// Why it cannot be expressed.
        reason: &'static str,
    },
    /// `oci-spec` refused to build a value (its builders validate some
    /// fields).
    #[error("{field}: rejected by oci-spec")]
    Oci {
        /// NRI field whose value was being converted.
        field: &'static str,
        /// The oci-spec error.
        #[source]
        source: oci_spec::OciSpecError,
    },
    /// CDI devices were requested, no CDI injector is configured and the
    /// policy for unresolved CDI devices is [`Unresolved::Error`](crate::Unresolved::Error).
    #[error("CDI devices {devices:?} requested but no CDI injector is configured")]
    CdiUnresolved {
        /// Fully qualified CDI device names.
        devices: Vec<String>,
    },
    /// The configured CDI injector failed.
    #[error("injecting CDI devices {devices:?} failed")]
    CdiInjection {
        /// Fully qualified CDI device names.
        devices: Vec<String>,
        /// The injector's error.
        #[source]
        source: BoxError,
    },
    /// A block I/O class was requested, no resolver is configured and the
    /// policy for unresolved classes is [`Unresolved::Error`](crate::Unresolved::Error).
    #[error("block I/O class {class:?} requested but no block I/O class resolver is configured")]
    BlockIoClassUnresolved {
        /// The class name.
        class: String,
    },
    /// The configured block I/O class resolver failed.
    #[error("resolving block I/O class {class:?} failed")]
    BlockIoClass {
        /// The class name.
        class: String,
        /// The resolver's error.
        #[source]
        source: BoxError,
    },
    /// The configured RDT class resolver failed.
    #[error("resolving RDT class {class:?} failed")]
    RdtClass {
        /// The class name.
        class: String,
        /// The resolver's error.
        #[source]
        source: BoxError,
    },
    /// The spec could not be serialized to JSON ([`spec_json`](crate::spec_json)).
    #[error("serializing the OCI spec")]
    Json {
        /// The serializer's error.
        #[source]
        source: serde_json::Error,
    },
}
