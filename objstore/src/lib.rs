//! Strata's object-store layer (S3, MinIO, file, memory) for the remote tier.
//!
//! Empty by design until tiered storage lands (issue 4): the workspace keeps the crate so the
//! dependency direction of DESIGN.md (`cache` → `objstore`, nothing upward) is fixed from day one.
