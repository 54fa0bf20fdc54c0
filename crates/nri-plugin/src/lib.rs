//! nri-plugin (placeholder).
