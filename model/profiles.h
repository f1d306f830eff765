// model/profiles.h — named shape presets: `flash` (the published DeepSeek V4 Flash shape,
// ds4-architecture.md §1.1) and `tiny` (same topology and layer pattern, small dims; design.md
// §5 adjusted for block sizes: expert FF 256 because Q2_K/Q4_K/Q8_K rows are whole 256-blocks).
//
// Role: the generator and the tests build configs from these; the loader does NOT restrict
// files to them (it validates rules, not sizes). Both presets pass validate_config().
#pragma once

#include <string_view>
#include <vector>

#include "core/status.h"
#include "model/config.h"

namespace ds4::model {

// tiny: 8 layers (0-1 dense, even >= 2 ratio 4 + indexer, odd >= 3 ratio 128), 3 hash layers,
// n_embd 256, 4 HC streams, 20 Sinkhorn iterations, 8 heads x 128 (RoPE tail 64), q/o LoRA 64,
// 4 output groups, window 32, 16 routed experts (4 used) + 1 shared, expert FF 256, indexer
// 4 heads x 128, top-k 16, vocab 8192, context 4096; RoPE/YaRN keys as in Flash.
ModelConfig tiny_profile();
// flash: the exact §1.1 values (43 layers, 4096, vocab 129280, ...).
ModelConfig flash_profile();
// "tiny" or "flash"; kInvalidArgument naming the accepted names otherwise.
Expected<ModelConfig> profile_by_name(std::string_view name);

// The same widths with only the first n_layer layers (a reduced-depth model, e.g. full-shape
// Flash widths that fit one H100): the per-layer arrays follow the DS4 layer rules. n_layer
// must keep the hash layers and at least one layer of each compression ratio.
Status set_layer_count(ModelConfig& c, uint32_t n_layer);
std::vector<std::string_view> profile_names();

}  // namespace ds4::model
