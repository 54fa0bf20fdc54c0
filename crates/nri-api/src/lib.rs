//! nri-api (placeholder).
