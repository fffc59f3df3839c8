//! Draft-model speculative decoding's step time: the target model's verify step plus the
//! draft model's own forward passes.
//!
//! vLLM's draft-model proposer (`method: draft_model`) runs after each target step: one
//! forward pass of the draft model over what the target just computed (the step's prompt
//! chunks, so the draft keeps its own KV, and each decoding request's newest token), then one
//! single-token pass per further draft. A step of `k` drafts a request therefore costs the
//! target's pass over `1 + k` verify rows a request plus `k` draft passes. Each pass is timed
//! by the draft model's own timer over the same kernel tables.

use alloc::boxed::Box;
use alloc::vec::Vec;

use servesim_core::timing::{RankLoad, StepBreakdown, StepTimer, TimerReport, TimingError};
use servesim_core::units::SimDur;

/// A target timer and a draft timer, composed per step.
pub struct DraftModelTimer {
    target: Box<dyn StepTimer>,
    draft: Box<dyn StepTimer>,
    /// Draft tokens a request gets each round.
    drafts: u32,
    /// The draft passes' loads, reused.
    scratch: Vec<RankLoad>,
}

impl DraftModelTimer {
    /// Times steps with `target` (which sees the verify rows) plus `drafts` passes of `draft`.
    #[must_use]
    pub fn new(target: Box<dyn StepTimer>, draft: Box<dyn StepTimer>, drafts: u32) -> Self {
        DraftModelTimer { target, draft, drafts: drafts.max(1), scratch: Vec::new() }
    }

    /// The draft model's passes for a step of `ranks`.
    fn draft_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        let rows_per_request = self.drafts + 1;
        self.scratch.resize_with(ranks.len(), RankLoad::default);
        let mut total = SimDur::ZERO;
        for pass in 0..self.drafts {
            for (d, r) in self.scratch.iter_mut().zip(ranks) {
                // Decoding requests (one near its end may verify fewer rows) at the mean
                // context of a verify row, one key longer each pass.
                let requests = r.decode_requests.div_ceil(rows_per_request);
                let context = r.decode_kv_tokens.checked_div(u64::from(r.decode_requests)).unwrap_or(0);
                d.prefill.clear();
                // The first pass also runs the step's prompt chunks through the draft.
                if pass == 0 {
                    d.prefill.extend_from_slice(&r.prefill);
                }
                d.decode_requests = requests;
                d.decode_kv_tokens = u64::from(requests) * (context + u64::from(pass));
            }
            if self.scratch.iter().all(RankLoad::is_empty) {
                break;
            }
            total = total + self.draft.step_time(&self.scratch)?;
        }
        Ok(total)
    }
}

impl StepTimer for DraftModelTimer {
    fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
        let verify = self.target.step_time(ranks)?;
        Ok(verify + self.draft_time(ranks)?)
    }

    /// The target's report, with the draft model's lookups beside its own (op kinds named
    /// `draft <kind>`), so the provenance counts every pass.
    fn report(&self) -> Option<TimerReport> {
        let mut r = self.target.report()?;
        if let Some(d) = self.draft.report() {
            r.lookups.extend(d.lookups.into_iter().map(|(kind, c)| (alloc::format!("draft {kind}"), c)));
        }
        Some(r)
    }

    fn breakdown(&mut self, ranks: &[RankLoad]) -> Option<StepBreakdown> {
        // The target's parts alone would hide the draft's passes.
        let _ = ranks;
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use servesim_core::timing::PrefillChunk;

    /// A timer charging 1 µs a new token plus 1 ns a decode key, and counting its calls.
    struct Linear(u32);

    impl StepTimer for Linear {
        fn step_time(&mut self, ranks: &[RankLoad]) -> Result<SimDur, TimingError> {
            self.0 += 1;
            let ns: u64 = ranks.iter().map(|r| r.new_tokens() * 1000 + r.decode_kv_tokens).sum();
            Ok(SimDur::from_ns(ns))
        }
    }

    #[test]
    fn a_step_adds_one_draft_pass_per_draft_token_with_the_prompt_in_the_first() {
        let mut t = DraftModelTimer::new(Box::new(Linear(0)), Box::new(Linear(0)), 3);
        // Two requests verifying 1 + 3 rows each (8 rows, 100 keys a row) and a 50-token chunk.
        let load = RankLoad {
            prefill: alloc::vec![PrefillChunk { new_tokens: 50, context_tokens: 0 }],
            decode_requests: 8,
            decode_kv_tokens: 800,
        };
        let target = (50 + 8) * 1000 + 800;
        // Draft passes: (50 + 2) tokens with 2 x 100 keys, then 2 tokens with 2 x 101 and 2 x 102.
        let draft = (52 * 1000 + 200) + (2000 + 202) + (2000 + 204);
        assert_eq!(t.step_time(&[load]).unwrap(), SimDur::from_ns(target + draft));
        // A prompt-only step: one draft pass over the prompt, none for absent decodes.
        let prompt = RankLoad {
            prefill: alloc::vec![PrefillChunk { new_tokens: 10, context_tokens: 0 }],
            decode_requests: 0,
            decode_kv_tokens: 0,
        };
        assert_eq!(t.step_time(&[prompt]).unwrap(), SimDur::from_ns(10_000 + 10_000));
    }
}
