//! Request placement across workers.

use crate::request::Request;
use crate::worker::Worker;

/// A routing policy.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Router {
    /// Each request goes to the next worker in turn.
    RoundRobin {
        /// Worker the next request goes to.
        next: usize,
    },
}

impl Router {
    /// Round-robin starting at worker 0.
    #[must_use]
    pub fn round_robin() -> Self {
        Router::RoundRobin { next: 0 }
    }

    /// Picks the worker for `req`.
    pub fn route(&mut self, _req: &Request, workers: &[Worker]) -> usize {
        match self {
            Router::RoundRobin { next } => {
                let w = *next % workers.len().max(1);
                *next = w + 1;
                w
            }
        }
    }
}
