//! nri-ttrpc (placeholder).
