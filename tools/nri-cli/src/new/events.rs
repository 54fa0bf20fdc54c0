//! The method the scaffold writes for each event.

/// One event the scaffold can write a method for.
#[derive(Debug)]
pub(super) struct EventInfo {
    /// The NRI event name.
    pub(super) name: &'static str,
    /// The method, indented for the `impl` block.
    pub(super) method: &'static str,
}

/// Every event a plugin can handle, in the order of the lifecycle.
pub(super) const EVENTS: &[EventInfo] = &[
    EventInfo {
        name: "RunPodSandbox",
        method: r#"    async fn run_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod.name, "pod started");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "CreateContainer",
        method: r#"    // The one event where the container can still change: fill `adjust`
    // with the builders (add_env, add_mount, add_device, add_rlimit,
    // set_linux_memory_limit, ...). An error fails the creation.
    async fn create_container(
        &self,
        pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<CreateContainerResponse> {
        tracing::info!(pod = %pod.name, container = %ctr.name, "creating container");
        let mut adjust = ContainerAdjustment::default();
        // The scenario expects this (CARGO_PKG_NAME: the plugin's name).
        adjust.add_env("CREATED_BY", env!("CARGO_PKG_NAME"));
        Ok(CreateContainerResponse {
            adjust: Some(adjust),
            ..Default::default()
        })
    }
"#,
    },
    EventInfo {
        name: "PostCreateContainer",
        method: r#"    async fn post_create_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ctr.name, "container created");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "StartContainer",
        method: r#"    async fn start_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ctr.name, "starting container");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "PostStartContainer",
        method: r#"    async fn post_start_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ctr.name, "container started");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "UpdatePodSandbox",
        method: r#"    async fn update_pod_sandbox(
        &self,
        pod: PodSandbox,
        _overhead: Option<LinuxResources>,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<()> {
        tracing::info!(pod = %pod.name, "updating pod");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "PostUpdatePodSandbox",
        method: r#"    async fn post_update_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod.name, "pod updated");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "UpdateContainer",
        method: r#"    async fn update_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
        _resources: Option<LinuxResources>,
    ) -> HandlerResult<UpdateContainerResponse> {
        tracing::info!(container = %ctr.name, "updating container");
        Ok(UpdateContainerResponse::default())
    }
"#,
    },
    EventInfo {
        name: "PostUpdateContainer",
        method: r#"    async fn post_update_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ctr.name, "container updated");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "StopContainer",
        method: r#"    async fn stop_container(
        &self,
        _pod: PodSandbox,
        ctr: Container,
    ) -> HandlerResult<StopContainerResponse> {
        tracing::info!(container = %ctr.name, "container stopped");
        Ok(StopContainerResponse::default())
    }
"#,
    },
    EventInfo {
        name: "RemoveContainer",
        method: r#"    async fn remove_container(&self, _pod: PodSandbox, ctr: Container) -> HandlerResult<()> {
        tracing::info!(container = %ctr.name, "container removed");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "StopPodSandbox",
        method: r#"    async fn stop_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod.name, "pod stopped");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "RemovePodSandbox",
        method: r#"    async fn remove_pod_sandbox(&self, pod: PodSandbox) -> HandlerResult<()> {
        tracing::info!(pod = %pod.name, "pod removed");
        Ok(())
    }
"#,
    },
    EventInfo {
        name: "ValidateContainerAdjustment",
        method: r#"    // A validator: sees every container's merged adjustment; an error
    // rejects it (the creation fails with your message).
    async fn validate_container_adjustment(
        &self,
        _req: ValidateContainerAdjustmentRequest,
    ) -> HandlerResult<()> {
        Ok(())
    }
"#,
    },
];
