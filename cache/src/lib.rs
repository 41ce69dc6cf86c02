//! Strata's block cache (foyer, RAM + disk) over remote segment objects.
//!
//! Empty by design until tiered storage lands (issue 4); see `objstore`.
