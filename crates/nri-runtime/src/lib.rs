//! nri-runtime (placeholder).
