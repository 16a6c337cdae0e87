//! Sluice broker
