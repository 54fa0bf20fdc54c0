//! The list of every protocol message, for code that must handle each one
//! (test vectors, fuzzing, registries).

/// Number of messages in the protocol schema.
pub const MESSAGE_COUNT: usize = 86;

/// Calls the macro `$callback` once with the comma-separated paths of every
/// protocol message type, in schema order.
///
/// Each type implements [`prost::Message`] and [`prost::Name`];
/// `<T as prost::Name>::NAME` is the upstream protobuf name (e.g.
/// `"CDIDevice"` for [`api::CdiDevice`](crate::api::CdiDevice)).
///
/// ```
/// macro_rules! names {
///     ($($ty:path),* $(,)?) => {
///         [$(<$ty as prost::Name>::NAME),*]
///     };
/// }
/// let names = nri_api::for_each_message!(names);
/// assert_eq!(names.len(), nri_api::MESSAGE_COUNT);
/// assert!(names.contains(&"POSIXRlimit"));
/// ```
#[macro_export]
macro_rules! for_each_message {
    ($callback:ident) => {
        $callback! {
            $crate::api::RegisterPluginRequest,
            $crate::api::UpdateContainersRequest,
            $crate::api::UpdateContainersResponse,
            $crate::api::LogRequest,
            $crate::api::ConfigureRequest,
            $crate::api::ConfigureResponse,
            $crate::api::FailurePolicy,
            $crate::api::SynchronizeRequest,
            $crate::api::SynchronizeResponse,
            $crate::api::RunPodSandboxRequest,
            $crate::api::RunPodSandboxResponse,
            $crate::api::UpdatePodSandboxRequest,
            $crate::api::UpdatePodSandboxResponse,
            $crate::api::PostUpdatePodSandboxRequest,
            $crate::api::PostUpdatePodSandboxResponse,
            $crate::api::StopPodSandboxRequest,
            $crate::api::StopPodSandboxResponse,
            $crate::api::RemovePodSandboxRequest,
            $crate::api::RemovePodSandboxResponse,
            $crate::api::CreateContainerRequest,
            $crate::api::CreateContainerResponse,
            $crate::api::PostCreateContainerRequest,
            $crate::api::PostCreateContainerResponse,
            $crate::api::StartContainerRequest,
            $crate::api::StartContainerResponse,
            $crate::api::PostStartContainerRequest,
            $crate::api::PostStartContainerResponse,
            $crate::api::UpdateContainerRequest,
            $crate::api::UpdateContainerResponse,
            $crate::api::PostUpdateContainerRequest,
            $crate::api::PostUpdateContainerResponse,
            $crate::api::StopContainerRequest,
            $crate::api::StopContainerResponse,
            $crate::api::RemoveContainerRequest,
            $crate::api::RemoveContainerResponse,
            $crate::api::StateChangeEvent,
            $crate::api::ValidateContainerAdjustmentRequest,
            $crate::api::PluginInstance,
            $crate::api::ValidateContainerAdjustmentResponse,
            $crate::api::Empty,
            $crate::api::PodSandbox,
            $crate::api::LinuxPodSandbox,
            $crate::api::Container,
            $crate::api::Image,
            $crate::api::Mount,
            $crate::api::Hooks,
            $crate::api::Hook,
            $crate::api::LinuxContainer,
            $crate::api::LinuxNamespace,
            $crate::api::LinuxDevice,
            $crate::api::LinuxDeviceCgroup,
            $crate::api::CdiDevice,
            $crate::api::User,
            $crate::api::LinuxResources,
            $crate::api::LinuxMemory,
            $crate::api::LinuxCpu,
            $crate::api::HugepageLimit,
            $crate::api::SecurityProfile,
            $crate::api::PosixRlimit,
            $crate::api::LinuxPids,
            $crate::api::LinuxIoPriority,
            $crate::api::LinuxNetDevice,
            $crate::api::LinuxScheduler,
            $crate::api::ContainerAdjustment,
            $crate::api::LinuxContainerAdjustment,
            $crate::api::LinuxSeccomp,
            $crate::api::LinuxSyscall,
            $crate::api::LinuxSeccompArg,
            $crate::api::LinuxMemoryPolicy,
            $crate::api::ContainerUpdate,
            $crate::api::LinuxContainerUpdate,
            $crate::api::ContainerEviction,
            $crate::api::LinuxRdt,
            $crate::api::KeyValue,
            $crate::api::OptionalString,
            $crate::api::OptionalRepeatedString,
            $crate::api::OptionalInt,
            $crate::api::OptionalInt32,
            $crate::api::OptionalUInt32,
            $crate::api::OptionalInt64,
            $crate::api::OptionalUInt64,
            $crate::api::OptionalBool,
            $crate::api::OptionalFileMode,
            $crate::api::CompoundFieldOwners,
            $crate::api::FieldOwners,
            $crate::api::OwningPlugins,
        }
    };
}
