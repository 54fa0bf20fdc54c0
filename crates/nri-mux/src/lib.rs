//! nri-mux (placeholder).
