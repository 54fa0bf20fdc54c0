//! nri-sim (placeholder).
