//! Sluice tests
