//! How the KV cache is sized: how many blocks its pool holds and the context of one sequence.

use super::EngineConfig;

/// How the KV cache is sized: its blocks, the context of one sequence, and notes for the
/// start-up line.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Sizing {
    pub(super) blocks: usize,
    pub(super) ctx: usize,
    pub(super) ctx_note: String,
}

/// Sizes the KV pool and picks the context: `--ctx-size` or the model's trained context (capped
/// so that one sequence fits the pool), and `--kv-memory` worth of blocks, or by default as
/// many as every slot at full context needs, within the memory budget. The pool always holds at
/// least one sequence at full context, so a request that fits the context never fails for blocks.
pub(super) fn size_kv(
    trained: usize,
    block_bytes: u64,
    block_size: usize,
    config: &EngineConfig,
) -> Result<Sizing, String> {
    let trained_or_default = if trained > 0 { trained } else { 4096 };
    let budget = config.kv_memory.unwrap_or(config.kv_budget_bytes);
    let budget_blocks = usize::try_from(budget / block_bytes.max(1)).unwrap_or(usize::MAX);
    let budget_tokens = budget_blocks.saturating_mul(block_size);
    let (ctx, ctx_note) = match config.ctx_size {
        Some(ctx) if trained > 0 && ctx > trained => {
            return Err(format!("--ctx-size {ctx} is larger than the model's trained context of {trained}"));
        }
        Some(ctx) if ctx < 2 => return Err(format!("--ctx-size {ctx} is too small")),
        Some(ctx) if ctx > budget_tokens => {
            let what = if config.kv_memory.is_some() { "--kv-memory" } else { "the memory for the KV cache" };
            return Err(format!("{what} holds {budget_tokens} tokens, fewer than --ctx-size {ctx}"));
        }
        Some(ctx) => (ctx, "as asked".to_string()),
        None if budget_tokens >= trained_or_default => (trained_or_default, "the model's trained context".into()),
        None if budget_tokens < 256 => {
            return Err(format!("the KV cache holds {budget_tokens} tokens, fewer than 256; raise --kv-memory"));
        }
        None => {
            (budget_tokens / 256 * 256, format!("capped from {trained_or_default} so one sequence fits the KV cache"))
        }
    };
    let full = config.parallel.saturating_mul(ctx.div_ceil(block_size));
    let blocks = if config.kv_memory.is_some() { budget_blocks } else { budget_blocks.min(full) };
    Ok(Sizing { blocks, ctx, ctx_note })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(parallel: usize, ctx: Option<usize>, budget: u64, kv_memory: Option<u64>) -> EngineConfig {
        EngineConfig {
            parallel,
            ctx_size: ctx,
            batch_tokens: 512,
            prefill_chunk: 64,
            max_queue: 8,
            kv_budget_bytes: budget,
            kv_memory,
            tool_format: None,
            speculation: None,
        }
    }

    #[test]
    fn by_default_the_pool_holds_every_slot_at_the_trained_context() {
        // 1000 bytes per block of 32.
        let sizing = size_kv(8192, 1000, 32, &config(4, None, 1 << 40, None)).unwrap();
        assert_eq!(sizing, Sizing { blocks: 4 * 256, ctx: 8192, ctx_note: "the model's trained context".into() });
    }

    #[test]
    fn a_small_budget_caps_the_context_to_what_one_sequence_may_hold() {
        // 10 MB: 10 000 blocks, 320 000 tokens; one sequence of 131072 does not fit 4 times.
        let sizing = size_kv(131072, 1000, 32, &config(4, None, 10_000_000, None)).unwrap();
        assert_eq!((sizing.blocks, sizing.ctx), (10_000, 131072));
        // 1 MB: 1000 blocks, 32 000 tokens (a multiple of 256): the context is cut to them.
        let sizing = size_kv(131072, 1000, 32, &config(4, None, 1_000_000, None)).unwrap();
        assert_eq!((sizing.blocks, sizing.ctx), (1000, 32_000));
        let sizing = size_kv(131072, 1000, 32, &config(4, None, 999_000, None)).unwrap();
        assert_eq!(sizing.ctx, 31_744, "999 blocks: 31 968 tokens, cut to a multiple of 256");
        assert!(sizing.ctx_note.contains("capped from 131072"), "{}", sizing.ctx_note);
        let err = size_kv(131072, 1000, 32, &config(4, None, 7_000, None)).unwrap_err();
        assert!(err.contains("fewer than 256"), "{err}");
    }

    #[test]
    fn kv_memory_sizes_the_pool_and_must_hold_the_asked_context() {
        // 2 MB: 2000 blocks whatever --parallel asks.
        let sizing = size_kv(8192, 1000, 32, &config(64, Some(4096), 0, Some(2_000_000))).unwrap();
        assert_eq!((sizing.blocks, sizing.ctx), (2000, 4096));
        let err = size_kv(8192, 1000, 32, &config(2, Some(8192), 0, Some(100_000))).unwrap_err();
        assert_eq!(err, "--kv-memory holds 3200 tokens, fewer than --ctx-size 8192");
    }

    #[test]
    fn an_asked_context_is_checked_against_the_trained_one() {
        assert_eq!(size_kv(2048, 1000, 32, &config(2, Some(1024), 1 << 30, None)).unwrap().ctx, 1024);
        let err = size_kv(2048, 1000, 32, &config(2, Some(4096), 1 << 30, None)).unwrap_err();
        assert_eq!(err, "--ctx-size 4096 is larger than the model's trained context of 2048");
    }
}
