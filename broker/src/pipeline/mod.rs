//! The request pipeline: what happens to a decoded request before and around its handler.
//!
//! - `authz`: what each API needs (Kafka's ACL rules), applied before the handler;
//! - `route`: cluster mode — a partition's requests reach only its leader, a key's only its
//!   coordinator;
//! - `dispatch`: runs both gates, then the API's handler (`handlers/`), and patches the answer.
//!
//! Each gate answers a [`Gate`]: run the handler, answer instead of it, run it on a filtered
//! request and patch its answer, or (no rule for the API) close the connection.

pub mod authz;
pub mod dispatch;
pub mod route;

pub use crate::handlers::gate::{Gate, Patch};
