// speculative/runtime.h — the DSpark speculative cycle (dspark.md §2.2-§2.6): ONE implementation used
// by the CLI, the bench and the server through engine/speculative.h.
//
// Role: given a ModelSession whose logits predict the next position and a Proposer, appends
// the next token(s) per step: the target's greedy seed plus the longest prefix of drafts the
// target confirms. Greedy only (the caller falls back to plain sampling at T > 0).
//
// Invariants (the correctness contract, tested against plain greedy decoding):
//  * Lossless: the appended stream equals plain greedy decoding token for token (ties ->
//    smallest id, an optional banned id never chosen), and the final session state
//    (serialize_state bytes, logits) equals the state plain decoding leaves.
//  * Only committed target rows reach the proposer's context (Proposer::sync(n) is called with
//    the committed length; rows of rejected drafts are never synced).
//  * Partial accepts commit through ModelSession::commit_prefix (prefix slots, no replay);
//    SpecConfig::replay forces rollback + ordinary decodes instead. Only then does a verify
//    take a checkpoint first (it copies every compressor state: on the 16-thread Xeon the
//    checkpoints were 1-2% of a DSpark run's time).
//  * Policies decide on counters only (no wall clock): the same inputs give the same output
//    and the same stats counters. Timings are measured for the report only.
//  * Never appends past the token budget (max_new) or the context.
//
// Flags (declared by the frontends in their core/flags.h table) and environment mirrors:
//   --dspark-confidence F       DS4_DSPARK_CONFIDENCE        σ threshold per position (0.6)
//   --dspark-confidence-grid L  DS4_DSPARK_CONFIDENCE_GRID   "a,b,c": per-position thresholds,
//                                                            last value extends; overrides the
//                                                            flat value when set
//   --dspark-fold               DS4_DSPARK_FOLD=1            seed verified as row 0 of the
//                                                            verify batch; armed only after a
//                                                            full accept
//   --dspark-fold-partial N     DS4_DSPARK_FOLD_PARTIAL=0/1  with fold: also stay/arm after a
//                                                            partial accept (k >= 1 drafts kept):
//                                                            the verify rows already captured the
//                                                            committed rows, so the next seed
//                                                            folds without a standalone decode.
//                                                            A d_0 miss still disarms. SpecConfig
//                                                            default off (the seed's rule); the
//                                                            costall preset (the engine default)
//                                                            turns it on, measured below.
//
// fold_after_partial default (tests/speculative/fold_bench_test.cpp, DISABLED_ bench; models/ds4-tiny.gguf,
// CPU 1 thread, 9 prompts x 128 tokens, best of 3 interleaved rounds; same proposals at the same
// positions, so tokens/cycle is identical across the policies). tok/s of fold-after-partial over
// fold-seed-rule (tokens per cycle in brackets):
//   position-keyed oracle, per-draft accept c: 0.50 -> 0.860 (1.76), 0.70 -> 0.873 (2.45),
//     0.80 -> 1.004 (3.32), 0.90 -> 1.049 (4.04), 0.95 -> 1.006 (4.32)
//   trained drafter models/ds4-tiny-dspark.gguf: conf 0.6 -> 1.006 (1.29; 3 partials in 9
//     prompts), conf 0.3 -> 0.986 (1.57)
//   gated variant (fold_partial_min_hits = 6 of the last 8 d_0 checks): 0.934 / 0.900 / 1.017 /
//     1.030 / 1.012 (oracle), 1.004 / 0.996 (drafter)
// A d_0 miss of a folded seed costs a verify of n+1 rows for one token where the standalone
// path's free check costs nothing; after a partial accept that loses more than the saved seed
// decode gains unless per-draft acceptance is >= ~0.8. With that drafter the seed's rule stayed.
// With the run6 drafter (runtime acceptance 81-94% under the cost gate) it turned: ds4-bench-spec
// -n 16 --gen-tokens 256, clock-free model ratio, costall (after partials) vs costallseed (the
// seed's rule), 2026-12-03 (identical decisions where no partial occurs):
//   Xeon 16-thread costs (0.97 + 0.21 n, 0.71, 0.58): structured 1.667 / 1.665, code 1.218 /
//     1.212, english 1.103 / 1.087, italian 0.994 / 0.995, ALL 1.200 / 1.194; without the cost
//     gate (all + partial vs all) ALL 1.201 / 1.187;
//   the compiled-in 2-thread costs (0.47 + 0.49 n, 1.18, 0.80): identical (1.037 ALL: the gate
//     sends armed folds to the standalone path at those prices).
// Wall clock (16-core Xeon, 16 threads, calibrated, 16 prompts x 256 tokens, one run): costall /
// costallseed structured 1.535 / 1.552, code 1.158 / 1.155, english 1.060 / 1.044, italian
// 0.982 / 0.984, ALL 1.148 / 1.150: the model's +0.9% is inside one run's noise there.
// So costall folds after partials; the seed's rule stays SpecConfig's default and costallseed.
//   --dspark-scheduler          DS4_DSPARK_SCHEDULER=0/1     windowed pause scheduler (on)
//   --dspark-scheduler-backoff  DS4_DSPARK_SCHEDULER_BACKOFF=1  pause ×2 per consecutive
//                                                            unproductive cycle (≤ ×8), pos-0
//                                                            bar +0.05 per step (≤ +0.20)
//   --dspark-margin-gate F      DS4_DSPARK_MARGIN_GATE       skip standalone proposals when the
//                                                            target top1−top2 logit margin < F
//   --dspark-cost-gate          DS4_DSPARK_COST_GATE=1       cost-aware engagement (below)
//   --dspark-cost-verify-base F DS4_DSPARK_COST_VERIFY_BASE  verify(n) ~ base + row * n, in
//   --dspark-cost-verify-row F  DS4_DSPARK_COST_VERIFY_ROW     units of one decode(1)
//   --dspark-cost-draft F       DS4_DSPARK_COST_DRAFT        one proposal reaching the head
//   --dspark-cost-draft-reject F DS4_DSPARK_COST_DRAFT_REJECT one proposal stopped by conf0
//   --dspark-cost-draft-overlap F, --dspark-cost-draft-reject-overlap F (DS4_DSPARK_COST_DRAFT_
//                               OVERLAP, _DRAFT_REJECT_OVERLAP): the same with overlap
//   --dspark-cost-window N      DS4_DSPARK_COST_WINDOW       memory of the acceptance stats
//   --dspark-overlap N          DS4_DSPARK_OVERLAP=-1/0/1     standalone proposal alongside the
//                                                            seed's decode (auto: 2 threads)
//   --dspark-replay             DS4_DSPARK_REPLAY=1          partial accepts by replay
//   --dspark-stats              DS4_DSPARK_STATS=1           counters + time split printed to
//                                                            stderr when the Runtime ends
//   --dspark-lookup N           DS4_DSPARK_LOOKUP=0/1        prompt-lookup drafts before DSpark
//                                                            proposals ("Lookup" below)
//
// Lookup (SpecConfig::lookup; dspark.md §6 idea 6, the hybrid proposer). Each cycle first asks
// NgramLookup (speculative/lookup.h) for the continuation of the latest earlier occurrence of the
// context's last k <= 4 tokens. It costs a few hash probes, so it is tried before the drafter:
//  * standalone: after the seed's decode its d_0 is checked for free against the seed's
//    logits; on a hit its drafts (up to kMaxBatchRows, not bound to the drafter's block) are
//    verified, trimmed by the cost gate, and the cycle ends; on a miss the cycle goes on as
//    if there had been no lookup (DSpark gates, proposal). The scheduler's pause does not stop
//    it (it saves no proposal); the tail rule and the token budget do.
//  * fold armed: [seed, lookup drafts] is verified instead of a DSpark proposal when its
//    expected gain beats the DSpark proposal's value and the standalone path's free check
//    (else the cycle unfolds, or DSpark proposes as before).
// Its acceptance is modelled by match length (LookupModel): a draft continuing a match of l
// tokens (the suffix plus the accepted drafts before it) is kept with probability q(l), one
// LookupModel per margin bucket (as the cost gate's states) of the logits current when the
// lookup proposed (the seed's row when folding, the d_0 row standalone): a confident target
// follows a repeat further. Clock-free model ratio, ds4-bench-spec -n 16 --gen-tokens 256
// costlookup at the 16-thread Xeon's costs (0.97 + 0.19 n / 0.73 / 0.55), one model for all
// margins -> per bucket (2026-12-04): structured 2.039 -> 2.168, code 1.692 -> 1.693, english
// 1.408 -> 1.422, italian 0.999 -> 0.995, ALL 1.433 -> 1.449.
// The free d_0 checks and the continuations after a d_0 hit learn in separate models: sharing
// the cells, a d_0 hit after a 1-gram match predicted 0.73 for d_1 on Italian and kept 0.41
// (0.71 / 0.30 after a 2-gram; structured's high-margin 1-grams 0.76 / 0.05). The
// continuation model starts every length <= kContFlatLen = 3 (a 1- or 2-gram match plus the
// drafts before) at kContPrior = 0.1 and chains from there; the d_0 model keeps kPrior 0.5 and
// chains from length 1. Clock-free model ratio (same command; S / C / E / I / ALL), shared ->
// split with the continuation's flat start at 3 (2026-12-05; flat start at 1 in brackets):
//   16-thread Xeon 0.97 + 0.19 n / 0.73 / 0.55: 2.195 / 1.705 / 1.395 / 1.003 / 1.451 ->
//     2.247 / 1.694 / 1.392 / 1.006 / 1.456 (2.216 / 1.709 / 1.387 / 0.999 / 1.450)
//   8-thread Xeon 0.804 + 0.314 n / 0.818 / 0.651: 1.753 / 1.455 / 1.222 / 0.979 / 1.291 ->
//     1.810 / 1.460 / 1.242 / 0.992 / 1.311 (1.824 / 1.466 / 1.236 / 0.983 / 1.308)
//   2-core EPYC 0.864 + 0.333 n / 0.966 / 0.678: 1.679 / 1.390 / 1.177 / 0.969 / 1.251 ->
//     1.717 / 1.400 / 1.186 / 0.985 / 1.268 (1.720 / 1.403 / 1.192 / 0.973 / 1.265)
//   2-core 0.72 + 0.41 n / 1.0 / 0.75: 1.527 / 1.299 / 1.121 / 0.967 / 1.194 ->
//     1.564 / 1.326 / 1.134 / 0.980 / 1.214 (1.586 / 1.315 / 1.140 / 0.971 / 1.213)
//   compiled-in 0.47 + 0.49 n / 1.18 / 0.80: 1.431 / 1.262 / 1.104 / 0.966 / 1.166 ->
//     1.385 / 1.263 / 1.127 / 0.989 / 1.172 (1.456 / 1.282 / 1.118 / 0.977 / 1.182)
// Also tried: flat start at 2 (italian 0.976 / 0.981 at the last two 2-core sets), base 0.2
// (0.973 there), one shorter "longer" step for continuations (kLonger 0.1-0.2: italian
// 0.986-0.993 at 0.72 + 0.41 n, structured -15-20%).
// Lookup cycles leave the DSpark statistics, warm state, probe ladder and scheduler alone.
// Measured 2026-12-03 (ds4-bench-spec -n 16 --gen-tokens 256, costlookup vs costall; clock-free
// model ratio at the 16-core Xeon's calibrated 16-thread costs 0.87 + 0.25 n / 0.73 / 0.55):
// structured 1.876 / 1.602, code 1.581 / 1.180, english 1.319 / 1.083, italian 0.993 / 0.993,
// ALL 1.365 / 1.176; at 8-thread costs (0.804 + 0.314 n / 0.818 / 0.651), the 2-core Zen 4's
// (0.69 + 0.24 n / 0.76 / 0.46) and the compiled-in defaults it also wins on the first three
// and stays within 0.005 on Italian. Wall clock on that host, 16 threads, calibrated, one call:
// 1.735 / 1.548, 1.469 / 1.136, 1.242 / 1.045, 0.954 / 0.959 (both Italian runs slow there).
// Modelling q by draft position instead (as for DSpark) verified too deep on Italian (5-draft
// verifies predicted 2.6 extra tokens and kept 0.8; model 0.979): the chained per-length prior
// (LookupModel) fixed it.
//
// Cost gate (cost_gate; on top of the scheduler, backoff and margin gate, which keep their
// meaning: a cycle they skip is skipped). Every quantity is in units of one decode(1); plain
// decoding earns 1 token per unit, so a cycle's "net gain" = tokens - cost.
//  * Cycle states: warm = the previous cycle's proposal kept all of its >= 2 drafts (a full
//    accept: predictable text, follow it), cold otherwise (also after any plain cycle); times
//    4 buckets of the target's top1-top2 logit margin at the decision (< 2, < 4, < 8, >= 8;
//    the d_0 row standalone, the seed's row when folding). One AcceptModel per state keeps
//    decayed counts (x (1 - 1/window) per proposal made in that state, 1 prior pseudo-count)
//    of P(a proposal drafts >= 1 token), P(d_k accepted | d_k checked) and P(d_k drafted |
//    d_0..d_{k-1} accepted). Priors: acceptance/continuation 1.0; P(draft) 0.1 cold (closed
//    until evidence: only the probe ladder below opens it), 1.0 warm (follow a streak until
//    the counts say no).
//  * Standalone, before proposing: expected net gain of a proposal =
//      P(draft) * (p_0 * max(0, best verify gain) - draft) - (1 - P(draft)) * draft_reject
//    (after a d_0 hit, verifying m drafts earns 1 + E[accepted of d_1..d_{m-1}] - verify(m);
//    the single-draft decode earns 0). Propose only when it is > 0. Otherwise the cycle is a
//    plain decode and the drafter's ring is not fed (ingestion is deferred to the next
//    proposal, which commits at most `window` rows, in chunks of 32; ~0.005 decode per row).
//  * Probe ladder: a cold runtime whose gate is closed still proposes once probe_gap cycles
//    passed since the last proposal and the margin is >= cost_probe_margin (6 logits): gap 4
//    (a fresh runtime is ready to probe at its first cycle), doubled by every unproductive
//    probe up to 512, back to 4 after any full accept of >= 2 drafts. So it notices quickly
//    when the text turns predictable, and backs off exponentially where it does not; warm
//    closed cycles never probe. Measured (2026-12-03, bench "model" ratio, 16 prompts x 256
//    tokens, all four channels, costall, under three calibrated cost sets: 2-core Zen 4
//    0.69 + 0.24 n / 0.76 / 0.46, 16-core Xeon at 8 threads 0.77 + 0.31 n / 0.82 / 0.63 and at
//    16 threads 0.98 + 0.20 n / 0.71 / 0.58), ALL channels:
//      gap 64, no first probe (the previous default): 1.188 / 1.107 / 1.176
//      gap 16 + first probe 1.193 / 1.122 / 1.183; gap 8 + first probe 1.194 / 1.126 / 1.185
//      gap 4 + first probe (default): 1.195 / 1.127 / 1.187; gap 32 + first probe: 1.189 /
//      1.116 / 1.174
//    At the 8-thread costs the cold prior below keeps a fresh gate closed (its expected gain is
//    ~0), so with gap 64 structured text spent its first 64 cycles and every cold spell plain:
//    structured 1.310 -> 1.449 there. Per channel, gap 4 vs 64: code 1.190 -> 1.221 / 1.129 ->
//    1.130 / 1.168 -> 1.209, english 1.095 / 1.045 -> 1.037 / 1.082 -> 1.085, italian 0.991 /
//    0.994 -> 0.989 / 0.991 -> 0.990. Earlier (drafter and costs of 2026-12-02 15:30 UTC) warm
//    after partial accepts of >= 2 lost 1% on code/english/italian. Cold P(draft) prior 0.5
//    instead of 0.25 (drafter and costs of 16:00): italian 0.973-0.978 (the cold gate opens at
//    start at these costs), 0.25: 0.991-0.993. Cold prior 0.25 -> 0.1 (2026-12-05, run6
//    drafter, costlookup, 16 prompts x 256 tokens, clock-free model ratio; at 0.25 the cold gate
//    still opened at the start at 16-thread prices, and most Italian proposals then were not
//    probes: its DSpark proposals cost it 1.3% against lookup alone; 0.15 -> 0.10 -> 0.05
//    moved italian 0.999 -> 1.003 -> 1.003), per cost set structured / code / english /
//    italian / ALL:
//      16-thread Xeon 0.97 + 0.19 n / 0.73 / 0.55: 2.168 / 1.693 / 1.422 / 0.995 / 1.449 ->
//        2.195 / 1.705 / 1.395 / 1.003 / 1.451 (lookup without DSpark: italian 1.008)
//      16-thread Xeon 0.87 + 0.25 n / 0.73 / 0.55: 1.948 / 1.565 / 1.296 / 0.987 / 1.362 ->
//        1.955 / 1.587 / 1.317 / 0.994 / 1.376
//      8-thread Xeon 0.804 + 0.314 n / 0.818 / 0.651: 1.745 / 1.444 / 1.210 / 0.976 / 1.284 ->
//        1.753 / 1.455 / 1.222 / 0.979 / 1.291
//      2-core Zen 4 0.69 + 0.24 n / 0.76 / 0.46: 2.097 / 1.690 / 1.399 / 1.007 / 1.441 ->
//        2.102 / 1.702 / 1.401 / 1.014 / 1.447
//      compiled-in 0.47 + 0.49 n / 1.18 / 0.80: 1.424 / 1.262 / 1.104 / 0.966 / 1.164 ->
//        1.431 / 1.262 / 1.104 / 0.966 / 1.166
//    Left as they were, measured at the first cost set with the 0.1 prior: probe gap minimum
//    2 / 8 (ALL 1.449 / 1.445, structured 2.184 / 2.141), probe margin 2 / 3 (italian 0.993 /
//    0.997), chained continuation/acceptance priors (no change: the closed gate no longer
//    reaches those estimates).
//    Probe margin 4 -> 6 (2026-12-05, costlookup with the split lookup models, same command;
//    S / C / E / I / ALL): with the lookup on, most of a cold gate's proposals are probes, and
//    on Italian they cost more than they found (no probes at all, i.e. lookup alone: italian
//    0.995 / 1.015 at the next two sets, structured 1.745 / 2.286):
//      16-thread Xeon 0.97 + 0.19 n / 0.73 / 0.55: 2.247 / 1.694 / 1.392 / 1.006 / 1.456 ->
//        2.251 / 1.698 / 1.390 / 1.015 / 1.461
//      2-core EPYC 0.864 + 0.333 n / 0.966 / 0.678: 1.717 / 1.400 / 1.186 / 0.985 / 1.268 ->
//        1.711 / 1.405 / 1.202 / 0.995 / 1.276
//      8-thread Xeon 0.804 + 0.314 n / 0.818 / 0.651: 1.810 / 1.460 / 1.242 / 0.992 / 1.311 ->
//        1.799 / 1.482 / 1.246 / 1.001 / 1.319
//      2-core 0.72 + 0.41 n / 1.0 / 0.75: 1.564 / 1.326 / 1.134 / 0.980 / 1.214 ->
//        1.556 / 1.341 / 1.143 / 0.990 / 1.222
//      compiled-in 0.47 + 0.49 n / 1.18 / 0.80: 1.385 / 1.263 / 1.127 / 0.989 / 1.172 ->
//        1.384 / 1.282 / 1.140 / 1.002 / 1.184
//    Margin 8 (the top bucket only) was within 0.004 of 6 on every channel at the first three.
//  * With overlap on (below), a standalone proposal that runs beside the seed's decode (the
//    overlap prediction said so) costs cost_draft_overlap / cost_draft_reject_overlap instead
//    (what it adds to the decode); other proposals, fold ones included, keep the full costs,
//    so a closed gate reopens only at the full price. The gate's decisions still read only counters,
//    logits and configuration (overlap on/off is configuration).
//  * After a d_0 hit: verify the m <= n drafts of the best expected gain (p_k from the
//    counts); m = 1 is the single-draft decode (same cost as plain).
//  * Fold armed: a folded cycle of m drafts earns 1 + sum_k prod_{i<=k} p_i - verify(m+1);
//    the same proposal falls back to the standalone path when that is worth more.
// Decisions read counters, the proposal and the target's logits only (no clock): reproducible.
//
// Overlap (SpecConfig::overlap, --dspark-overlap, DS4_DSPARK_OVERLAP; auto = on with exactly 2
// backend threads and the cost gate off, or under the cost gate with free overlap prices,
// kFreeOverlapCost). A standalone proposal from seed t at position L reads only the drafter's
// ring rows < L, never the seed's decode, so the runtime may run the two at once through
// Backend::run_pair (the CPU backend splits its threads in two, one part per task) instead of
// one after the other on all threads. When it was introduced, a decode scaled poorly to 2 threads (~1.35x) and so did a
// 5-row drafter block, so max(decode, proposal) on one thread each beat decode + proposal on
// two. Since the CPU backend splits small ops too (2026-12-03: decode 1.25x faster on 2
// threads), the pair adds ~0.97 decode for a full chain vs 1.18 sequential, and with the cost
// gate on it lost (bench costall, 8 prompts x 128 tokens: english 0.997 -> 0.972, italian
// 0.994 -> 0.985, structured/code equal), hence auto = off under the cost gate; the plain
// scheduler presets still gain from it (baseline ALL 0.772 -> 0.891). Gates that read
// the seed's logits (margin gate, cost gate) still decide after the decode: a proposal they
// reject is dropped uncounted (overlap_discards) and the cycle is what it would have been
// without overlap. Whether to overlap is predicted from counters only (the last two standalone
// cycles that wanted a proposal got one). The ring is synced to L before the pair, as the
// sequential path syncs it before proposing; at the same prices every counter, draft and
// output is the same with overlap on or off (tests/speculative/overlap_test.cpp), only the time split
// moves: t_decode then holds the pair's wall time and t_propose nothing of it.
// Free overlap (both overlap prices <= kFreeOverlapCost, cost gate on): every standalone cycle
// that wants a proposal overlaps it, and neither the scheduler's pause nor the margin gate
// stops it (they exist to save proposal time); the d_0 check and the cost gate's verify
// decisions stay. Measured 2026-12-03 on the 16-core Xeon host at 16 threads, 8 + 8 per pair,
// with the pool of that morning (the pair took 0.78 decode(1)): bench costall, 16 prompts x
// 256 tokens, --calibrate, free overlap vs --overlap 0 in one session: structured 1.626 vs
// 1.541, code 1.392 vs 1.154, english 1.347 vs 1.050, italian 1.191 vs 0.991 (ALL 1.376 vs
// 1.152); at 8 threads (calibrated -0.085) italian fell 0.983 -> 0.947, hence the margin. Once
// the pool stopped involving idle threads in small jobs, a 16-thread decode got faster and the
// pair measured +0.04, +0.04, -0.13, -0.08, -0.08 there (five calibrations on two leases of
// the host): free in one of them only.
// CPU defaults (kCpuCost*): the cost probe (now calibrate_dspark_costs, engine/speculative.h;
// `ds4 --dspark-calibrate` prints a machine's own figures as DS4_DSPARK_COST_* lines) on
// models/ds4-tiny.gguf + ds4-tiny-dspark.gguf, 2 threads, 40 reps, AVX2 2-core machine (Zen 1,
// 2 GHz), tree of 2026-12-03 00:00 UTC, two runs: decode(1) 2.11-2.15 ms; verify(n) ~ 0.474 +
// 0.485-0.494 n (n = 2..6) -> 0.47 + 0.49 n; a proposal (3 stages x 6 block rows + the vocab
// head for 5 rows) 1.175-1.181 -> 1.18; stopped by conf0 0.80; ring ingestion 0.012/row
// batched, 0.015/row one at a time. Before the backend split small ops over both threads the
// same probe gave 0.66 + 0.37 n, 1.00 and 0.64 (a decode was slower, so everything else was
// cheaper in its units). These move with the kernels, the threading and the machine (a 16-core
// AVX-512 host measured 0.86 + 0.30 n, 0.83, 0.62 at 8 threads): re-measure with
// --dspark-calibrate (per machine, backend, thread count and model) and pass them on.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/reduce.h"
#include "core/status.h"
#include "session/session.h"
#include "speculative/drafter.h"
#include "speculative/lookup.h"

namespace ds4::speculative {

// CPU defaults of the cost gate (decode(1) = 1; see the header comment for how they were measured).
inline constexpr float kCpuCostVerifyBase = 0.47f;
inline constexpr float kCpuCostVerifyRow = 0.49f;
inline constexpr float kCpuCostDraft = 1.18f;
inline constexpr float kCpuCostDraftReject = 0.80f;
// The same two for a proposal that overlaps the seed's decode (standalone path, overlap on).
// What the pair adds to decode(1) is lower (probe of 2026-12-02 18:58 UTC, 2 threads, 60 reps,
// AVX2 machine, decode 3.18 ms: full chain 0.56 vs 1.01 sequential, conf0-stopped 0.21 vs
// 0.69), but pricing overlapped proposals at those figures opened the gate more often and lost
// 2-4% on every channel (bench 8 prompts x 128 tokens, costall: structured 1.139 -> 1.117,
// code 1.023 -> 0.982, english 0.974 -> 0.956, italian 0.980 -> 0.964): a dropped pair and a
// mispredicted overlap are not in the model. So by default they are priced like sequential
// proposals; the flags let a backend with cheaper overlap say otherwise.
inline constexpr float kCpuCostDraftOverlap = kCpuCostDraft;
inline constexpr float kCpuCostDraftRejectOverlap = kCpuCostDraftReject;
// Free overlap: both overlap prices 0 (at most this) mean a proposal beside the seed's decode
// adds nothing to it, as where a decode gains little from its second half of the threads
// (16-core Xeon, 2026-12-03, before the pool capped small jobs: decode(16) 1.6 ms; decode on 8
// threads beside a proposal on the other 8 took 0.78 of it). Then the standalone path overlaps
// every proposal it wants, and the two gates that exist to save proposal time, the scheduler's
// pause and the margin gate, let it through; the cost gate still decides what is verified.
// calibrate_dspark_costs sets these prices when it measures the pair at least
// kFreeOverlapMargin below a decode: inside real cycles a pair cost 0.04-0.15 decode more than
// the calibration's (8 threads: calibrated -0.085, in-cycle +0.035-0.067; free overlap there
// lost italian 0.983 -> 0.947), so the margin must exceed that gap. At 0.10 a calibration of
// the 16-thread Xeon (2026-12-04, a slow decode(1) sample: pair -0.125 / -0.120) turned free
// overlap on and it lost: ds4-bench-spec costlookup, 16 prompts x 256 tokens, same costs
// (0.914 + 0.236 n, 0.720, 0.572), sequential vs free overlap prices alternated twice in one
// lease: structured 1.768 / 1.752 vs 1.792 / 1.832, code 1.478 / 1.501 vs 1.329 / 1.324,
// english 1.250 / 1.253 vs 1.180 / 1.180, italian 0.974 / 0.951 vs 0.924 / 0.930, ALL 1.303 /
// 1.304 vs 1.241 / 1.236. 0.20 keeps the one measured win (-0.22, the pool of 2026-12-03).
inline constexpr float kFreeOverlapCost = 0.0f;
inline constexpr float kFreeOverlapMargin = 0.20f;

// Cost parameters of the gate (decode(1) = 1).
struct CostModel {
  float verify_base = kCpuCostVerifyBase, verify_row = kCpuCostVerifyRow;
  float draft = kCpuCostDraft, draft_reject = kCpuCostDraftReject;
  float verify(int n) const { return verify_base + verify_row * static_cast<float>(n); }
};

// Decayed acceptance counts of the cost gate (header comment). Index k = draft position.
struct AcceptModel {
  static constexpr float kPriorWeight = 1.0f;  // pseudo-counts of the prior
  AcceptModel() = default;
  explicit AcceptModel(float prior_draft) : prior_draft(prior_draft) {}
  float prior_draft = 1.0f;  // prior of P(draft); acceptance / continuation priors are 1.0
  float draft_n = 0, draft_hit = 0;                                  // proposals / with >= 1 draft
  float acc_n[kMaxBlockSize] = {}, acc_hit[kMaxBlockSize] = {};      // d_k checked / accepted
  float cont_n[kMaxBlockSize] = {}, cont_hit[kMaxBlockSize] = {};    // d_{k-1} accepted, k allowed / d_k drafted
  void decay(float keep);                  // every count *= keep
  void note_proposal(bool drafted);
  void note_accept(int k, bool hit);
  void note_cont(int k, bool drafted);
  float p_draft() const;
  float p_accept(int k) const;
  float p_cont(int k) const;               // k >= 1
};

// Acceptance of lookup drafts by match length (header comment "Lookup"): a draft continuing a
// match of l tokens (the lookup's suffix plus the drafts before it, all accepted) is accepted
// with probability q(l). Decayed counts per length; a length's counts decay when it is seen.
// Lengths up to flat_len take the prior `base`; each longer length's prior is the estimate one
// shorter moved kLonger of the way to 1 (longer matches are more predictive, and rarely seen
// lengths must not sit at an optimistic 1.0: with a flat prior of 1.0, Italian's 5-draft
// lookup verifies predicted 2.6 extra tokens and kept 0.8). The runtime keeps d_0 checks
// (kPrior from length 1) and continuations after a hit (kContPrior up to kContFlatLen) in
// separate models: header comment "Lookup".
struct LookupModel {
  static constexpr int kMaxLen = 12;  // lengths >= kMaxLen share the last cell
  static constexpr float kPrior = 0.5f, kContPrior = 0.1f, kPriorWeight = 1.0f, kLonger = 0.4f;
  static constexpr int kContFlatLen = 3;
  float base = kPrior;
  int flat_len = 1;
  float n[kMaxLen + 1] = {}, hit[kMaxLen + 1] = {};
  float q(int l) const;
  void note(int l, bool accepted, float keep);
};

// Expected net gain of verifying m of n drafts after a d_0 hit (standalone path), maximized
// over m in [1, n] (m = 1: the single-draft decode, gain 0). p[k] = P(d_k accepted | d_{k-1}
// accepted) for k >= 1 (p[0] unused). Ties -> the smaller m. Writes the gain when non-null.
int best_verify_drafts(const CostModel& c, const float* p, int n, float* gain);
// Expected net gain of a folded cycle verifying [seed, d_0..d_{m-1}], maximized over m in
// [1, n]; p[k] = P(d_k accepted | d_{k-1} accepted), p[0] = P(d_0 accepted). Ties -> smaller m.
int best_fold_drafts(const CostModel& c, const float* p, int n, float* gain);

struct SpecConfig {
  float confidence = 0.6f;               // flat σ threshold (all positions)
  std::vector<float> confidence_grid;    // per-position thresholds (last extends); empty = flat
  bool fold = false;
  // Fold also after partial accepts (only with fold). Default false: figures in the header.
  bool fold_after_partial = false;
  // Gate of fold_after_partial: arm after a partial only when at least this many of the last
  // 8 d_0 checks hit (a folded d_0 miss costs a whole verify for one token). 0 = always.
  int fold_partial_min_hits = 0;
  bool scheduler = true;
  int sched_window = 4;                  // cycles per profitability window
  int sched_skip = 2;                    // pause after a low-acceptance window
  int sched_slow_skip = 4;               // pause after a window with >= half no-draft cycles
  float sched_min_avg = 1.5f;            // accepted drafts per cycle below this = low
  int no_draft_skip = 0;                 // pause after each no-draft cycle (0 = off, ds4#833)
  int tail_min_tokens = 10;              // no proposals when fewer tokens remain (0 = off)
  bool backoff = false;
  float margin_gate = 0.0f;              // logits; <= 0 = off. Margin = top1 - top2 of the logits
                                         // after the seed's decode (the row d_0 must match)
  bool replay = false;
  bool stats = false;
  int max_draft = 0;                     // cap on drafts per proposal (0 = block size)
  // Cost gate (header comment). Costs in decode(1) units.
  bool cost_gate = false;
  float cost_verify_base = kCpuCostVerifyBase;
  float cost_verify_row = kCpuCostVerifyRow;
  float cost_draft = kCpuCostDraft;
  float cost_draft_reject = kCpuCostDraftReject;
  float cost_draft_overlap = kCpuCostDraftOverlap;            // standalone proposals, overlap on
  float cost_draft_reject_overlap = kCpuCostDraftRejectOverlap;
  int cost_window = 16;                  // proposals of memory of the acceptance statistics
  float cost_probe_margin = 6.0f;        // probes only when the d_0 row's top1-top2 margin >= this
  // Standalone proposals run concurrently with the seed's decode (header comment "Overlap"):
  // -1 auto = on when the session's backend has exactly 2 threads and the cost gate is off, or
  // when the cost gate is on with free overlap prices (kFreeOverlapCost); 0 off, 1 on.
  int overlap = -1;
  // Hybrid proposer (header comment "Lookup"): prompt-lookup drafts (speculative/lookup.h) tried
  // before a DSpark proposal, free of the drafter's cost.
  bool lookup = false;
};

// "0.55,0.6,0.65" -> {0.55, 0.6, 0.65}; each value in [0, 1]. kInvalidArgument otherwise.
Status parse_confidence_grid(std::string_view text, std::vector<float>* out);

// §2.6 counters (+ time split, report only).
struct SpecStats {
  int64_t cycles = 0;              // steps through the runtime
  int64_t seeds = 0;               // target-chosen tokens appended (standalone + folded)
  int64_t folded_seeds = 0;        // seeds verified as row 0 of a fold batch
  int64_t proposals = 0;           // proposer calls
  int64_t proposed_tokens = 0;
  int64_t accepted_draft_tokens = 0;
  int64_t full_accepts = 0, partial_accepts = 0;
  int64_t direct_full_commits = 0, direct_partial_commits = 0, replay_fallbacks = 0;
  int64_t first_misses = 0;        // d_0 rejected (free check or fold row 0)
  int64_t no_draft = 0;            // proposer gave nothing (confidence / no context)
  int64_t conf0_rejects = 0;
  int64_t no_room = 0;             // budget/context left no room for drafts
  int64_t invalid_draft = 0;       // drafts cut at an invalid / banned / stop id
  int64_t scheduler_skips = 0, tail_skips = 0, margin_skips = 0;
  int64_t verify_calls = 0, verify_rows = 0, single_draft_decodes = 0;
  int64_t cost_skips = 0;          // cycles the cost gate kept plain (no proposal)
  int64_t cost_trims = 0;          // proposals verified with fewer drafts than drafted
  int64_t cost_unfolds = 0;        // armed fold cycles sent to the standalone path by the gate
  int64_t cost_probes = 0;         // proposals made although the gate was closed (probe ladder)
  int64_t overlapped = 0;          // standalone proposals computed alongside the seed's decode
  int64_t overlap_discards = 0;    // of those, dropped because a gate then said no
  int64_t overlap_conf0 = 0;       // overlapped proposals stopped by the conf0 precheck
  int64_t overlap_discard_conf0 = 0;  // of those, dropped by a gate
  int64_t lookups = 0;             // cycles whose drafts came from the lookup (checked or verified)
  int64_t lookup_first_misses = 0; // of those, d_0 rejected
  int64_t lookup_drafts = 0;       // lookup drafts put to the target: d_0 of every standalone
                                   // check, the verified ones after a hit, a fold batch's
                                   // (also in proposed_tokens)
  int64_t lookup_accepted = 0;     // of those, kept (also in accepted_draft_tokens)
  int64_t draft_len_hist[kMaxBlockSize + 1] = {};
  int64_t accepted_len_hist[kMaxBlockSize + 1] = {};
  double t_decode = 0, t_propose = 0, t_sync = 0, t_verify = 0, t_commit = 0, t_replay = 0, t_total = 0;  // s

  std::string report() const;  // multi-line, "dspark: ..." lines
};

// What a proposer sees of the target and what it proposes.
class Proposer {
 public:
  virtual ~Proposer() = default;
  virtual int block_size() const = 0;
  // Target layers whose HC mean the proposer needs for every processed row (may be empty).
  virtual std::vector<int> capture_layers() const { return {}; }
  // Every row the target processes (prefill, decode, verify — committed or not).
  virtual void on_capture(int64_t pos, std::span<const float> hidden) {}
  // Positions [0, n_committed) of the session are final; rows at >= n_committed are not.
  virtual void sync(int64_t n_committed) {}
  virtual void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds,
                       Proposal* out) = 0;
};

// The DSpark drafter as a Proposer: buffers captures by position and feeds only committed
// rows (the trailing `window` of them) into the drafter's rings on sync().
class DSparkProposer final : public Proposer {
 public:
  explicit DSparkProposer(Drafter& drafter);
  int block_size() const override { return d_.config().block_size; }
  std::vector<int> capture_layers() const override { return d_.config().target_layers; }
  void on_capture(int64_t pos, std::span<const float> hidden) override;
  void sync(int64_t n_committed) override;
  void propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thresholds, Proposal* out) override;
  Drafter& drafter() { return d_; }

 private:
  Drafter& d_;
  int64_t cap_ = 0;                 // capture slots
  int64_t width_ = 0;               // floats per capture
  std::vector<float> buf_;          // [cap_, width_]
  std::vector<int64_t> tag_;        // [cap_] position held (-1 none)
};

class Runtime {
 public:
  // Installs the proposer's capture layers and sink on `s` (call before the prompt prefill so
  // the context rows are captured); the destructor removes them (and prints the stats report
  // to stderr when cfg.stats).
  Runtime(session::ModelSession& s, Proposer& p, SpecConfig cfg);
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // One step (engine Decoder contract): clears *out, writes the tokens chosen; all are
  // appended except a final stop_token. Nothing written when the context is full.
  // max_new >= 1: token budget left; stop_token / banned_token: -1 for none.
  Status step(int max_new, int32_t stop_token, int32_t banned_token, std::vector<int32_t>* out);

  const SpecStats& stats() const { return stats_; }
  // "dspark: policy fold=F grid=G backoff=B margin=M cost_gate=C scheduler=S overlap=O
  // fold_partial=P" (G = grid length, O = whether overlap is on, P = fold after partial accepts
  // in effect) followed by stats().report(): what --dspark-stats prints.
  std::string report() const;
  const SpecConfig& config() const { return cfg_; }
  bool fold_armed() const { return fold_armed_; }
  // Cost gate: statistics per state (cold/warm x margin bucket); warm = the previous cycle's
  // proposal was a full accept of >= 2 drafts. probe_gap(): cycles a cold gate-closed runtime waits between
  // probes.
  const AcceptModel& accept_model(int state) const { return am_[state]; }
  // Lookup acceptance per margin bucket (kMarginBuckets) of d_0 checks (continuation false)
  // or of the drafts after a d_0 hit (true), and the bucket of the last lookup.
  const LookupModel& lookup_model(int bucket, bool continuation) const {
    return lkm_[bucket + (continuation ? kMarginBuckets : 0)];
  }
  int lookup_bucket() const { return lk_bucket_; }
  int probe_gap() const { return probe_gap_; }
  int cost_state() const { return state_; }  // of the last cycle: warm * kMarginBuckets + bucket
  static constexpr int kProbeGapMin = 4, kProbeGapMax = 512;
  static constexpr int kMarginBuckets = 4;     // top1 - top2 logit margin: < 2, < 4, < 8, >= 8
  static constexpr float kColdPrior = 0.1f, kWarmPrior = 1.0f;  // prior P(draft); header comment
  static int margin_bucket(float margin);
  void reset_policy();  // scheduler / backoff / fold state back to start (new request)

 private:
  int32_t choose(std::span<const float> logits) const;
  // Greedy id and top1 - top2 margin of the session's current logits (banned id excluded), one
  // fused pass (core/reduce.h) cached per ModelSession::logits_epoch(): the seed's choice, the
  // margin gate, the cost gate's bucket and the free d_0 check all read this one result.
  const TopTwo& top();
  // choose() for a verify row, reusing the argmax the session already took (first maximum):
  // the same token unless that is the banned id or NaN (the session's scan does not skip NaN),
  // which take the full pass. Saves one pass over n_vocab logits per checked row.
  int32_t row_choice(const session::RowResult& r) const;
  void thresholds(float* thr, int n) const;
  // have_proposal: prop_ already holds the (cleaned) proposal of this seed (fold fallback).
  Status standalone(int32_t seed, int max_new, std::vector<int32_t>* out, bool have_proposal = false);
  Status fold_cycle(int32_t seed, int max_new, std::vector<int32_t>* out, bool* handled);
  int clean_drafts(Proposal& p) const;  // cut at invalid/banned/stop ids; returns n
  int propose_drafts(int32_t seed, int64_t L, int n_allow);  // sync + propose + finish_proposal
  int finish_proposal();  // clean prop_ + count it (stats, acceptance model); returns n
  // Decodes the seed and, concurrently, proposes from it into prop_ (not yet counted).
  Status decode_with_proposal(int32_t seed, int64_t L, int n_allow);
  Status commit(int keep, int rows, const int32_t* row_tokens);
  bool scheduler_paused();
  void scheduler_note(bool drafted, int accepted);
  void note_d0(bool hit);
  bool fold_after_partial_open() const;  // fold_after_partial and its gate
  // Cost gate helpers.
  // Draft costs of an overlapped standalone proposal when `overlapped` (and overlap is on).
  CostModel cost_model(bool overlapped = false) const;
  // Expected net gain of proposing; overlapped: the proposal runs (ran) beside the seed's decode.
  float proposal_value(int n_allow, bool folding, bool overlapped) const;
  void fill_accept(float* p, int n, bool with_cont) const;
  // Counts of one checked proposal: drafts d_first..d_{m-1} were checked (d_k's check stops at
  // the first miss), `accepted` of d_0.. kept; n_drafted drafted of n_allow allowed.
  void note_checked(int first, int m, int accepted, int n_drafted, int n_allow);

  session::ModelSession& s_;
  Proposer& p_;
  SpecConfig cfg_;
  SpecStats stats_;
  int32_t stop_ = -1, banned_ = -1;
  bool fold_armed_ = false;
  // Scheduler (counters only).
  int pause_ = 0;
  int win_cycles_ = 0, win_accepted_ = 0, win_no_draft_ = 0;
  int streak_ = 0;  // consecutive unproductive cycles (backoff)
  uint32_t d0_hits_ = 0;  // last 8 d_0 checks, newest in bit 0 (1 = hit)
  // Cost gate (statistics kept whether or not the gate is on).
  // [warm * kMarginBuckets + margin bucket]: cold models start closed (kColdPrior), warm ones
  // open (kWarmPrior: follow a streak until the counts say otherwise).
  AcceptModel am_[2 * kMarginBuckets] = {
      AcceptModel(kColdPrior), AcceptModel(kColdPrior), AcceptModel(kColdPrior), AcceptModel(kColdPrior),
      AcceptModel(kWarmPrior), AcceptModel(kWarmPrior), AcceptModel(kWarmPrior), AcceptModel(kWarmPrior)};
  int state_ = 0;         // this cycle's model index
  bool prev_warm_ = false;  // the previous cycle fully accepted >= 2 drafts
  float margin_ = 0.0f;     // this cycle's top1 - top2 at the standalone decision
  bool warm_ = false;     // this cycle fully accepted >= 2 drafts (the next one is warm)
  int since_proposal_ = kProbeGapMin;  // cycles since the last proposal (start: probe at once)
  int probe_gap_ = kProbeGapMin;    // cold gate-closed cycles between probes
  bool probing_ = false;            // this cycle's proposal is a probe
  AcceptModel& am() { return am_[state_]; }
  const AcceptModel& am() const { return am_[state_]; }
  // Lookup (SpecConfig::lookup): drafts after context + tail into prop_ (at most what the
  // budget, the context and a verify batch with the tail rows allow); sets lk_ to the match
  // length when there are any (0 otherwise). Returns the number of drafts.
  int propose_lookup(std::span<const int32_t> tail, int max_new);
  void count_lookup(int n);  // a lookup whose first n drafts are put to the target (stats)
  // p[j] = q(match + j) of this cycle's lookup, or the DSpark state's p_accept(j).
  void fill_checked(float* p, int n) const;
  // Drafts d_first..d_{m-1} of a lookup were checked (the check stops at the first miss) and
  // `accepted` of d_0.. kept.
  void note_lookup(int first, int m, int accepted);
  // The LookupModel of lookup draft d_j: the d_0 checks' or the continuations' (j >= 1), in
  // the margin bucket the lookup proposed from.
  void reset_lookup_models();  // d_0 models: kPrior; continuation models: kContPrior, kContFlatLen
  int lk_table(int j) const { return lk_bucket_ + (j > 0 ? kMarginBuckets : 0); }
  // After d_0 was accepted (free check): verify (or decode) drafts d_0..d_{n-1} of prop_,
  // commit the kept prefix, append it to *out and update counters and fold arming.
  Status verify_after_hit(int n, int n_drafted, int n_allow, std::vector<int32_t>* out);
  // The fold batch [seed, d_0..d_{n-1}] of prop_: verify, commit, counters, arming.
  Status fold_verify(int32_t seed, int n, int n_drafted, int n_allow, std::vector<int32_t>* out);
  void note_probe(bool productive);
  // Overlap (counters only): on for this runtime; how many of the last standalone cycles that
  // wanted a proposal got past the gates in a row (capped). Overlap when >= kOverlapMinPasses:
  // a single pass after a gated cycle is a poor predictor where the margin alternates (code,
  // bench "all": 61% of single-pass predictions were dropped), and a dropped pair costs the
  // decode its second thread.
  static constexpr int kOverlapMinPasses = 2;
  bool overlap_on_ = false;
  bool free_overlap_ = false;       // overlap on, cost gate on, both overlap prices free
  int overlap_passes_ = kOverlapMinPasses;
  Proposal prop_;
  int32_t rows_[session::kMaxBatchRows] = {};
  // Lookup: the n-gram index over the session's tokens, its acceptance by match length, and
  // this cycle's match length (0 when the proposal, if any, is DSpark's).
  NgramLookup lookup_;
  LookupModel lkm_[2 * kMarginBuckets];  // [d_0 checks | continuations] x margin bucket
  int lk_ = 0;
  int lk_bucket_ = 0;  // margin bucket of the logits current when the lookup proposed
  TopTwo top_;                      // top() cache: valid for (top_epoch_, top_banned_)
  uint64_t top_epoch_ = ~uint64_t{0};
  int32_t top_banned_ = -2;
};

}  // namespace ds4::speculative
