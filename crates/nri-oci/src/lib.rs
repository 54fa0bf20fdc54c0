//! nri-oci (placeholder).
