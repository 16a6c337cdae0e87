//! Sluice client
