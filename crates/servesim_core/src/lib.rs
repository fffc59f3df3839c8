//! servesim's simulation core: a deterministic discrete-event simulation of LLM serving.
//!
//! Requests arrive from a [`traffic`] source, a [`router`] places them on [`worker`]s, and each
//! worker's [`engine`] scheduler (vLLM, SGLang or TensorRT-LLM semantics) forms forward steps
//! over its [`kv`] cache. A [`timing::StepTimer`] supplied by a performance model says how long
//! each step takes; [`metrics`] turns the per-request milestones into the incumbents' report
//! figures. [`sim::Simulation`] owns the event loop.
//!
//! The crate is `#![no_std]` + `alloc`: it does no IO, knows no serialisation format and
//! never reads a clock. Time is integer nanoseconds ([`units::SimTime`]); randomness comes
//! from one root seed through named sub-streams of our own pinned generator ([`rng`]);
//! transcendental maths goes through `libm`. One seed therefore gives bit-identical results
//! natively and in WebAssembly.
#![no_std]
#![warn(missing_docs)]

extern crate alloc;
#[cfg(any(test, feature = "std"))]
extern crate std;

pub mod content;
pub mod engine;
pub mod frontend;
pub mod host;
pub mod kv;
pub mod metrics;
pub mod planner;
pub mod queue;
pub mod radix;
pub mod record;
pub mod request;
pub mod rng;
pub mod router;
pub mod sim;
pub mod timing;
pub mod traffic;
pub mod transfer;
pub mod units;
pub mod worker;

#[cfg(feature = "std")]
impl std::error::Error for sim::SimError {}
