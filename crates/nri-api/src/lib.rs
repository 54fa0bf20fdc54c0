//! NRI protocol types (work in progress).

/// Protocol messages and enums generated from `proto/nri/pkg/api/v1alpha1/api.proto`.
pub mod api {
    include!("generated/nri.pkg.api.v1alpha1.rs");
}
