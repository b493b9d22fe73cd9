// A larger model started from a smaller one's weights, the way ModernBERT-large was started
// from ModernBERT-base (ModernBERT's init_from_checkpoint with mode tile_weights_from_middle):
// layer l of the larger model takes the layer round(l x L_small / L_large) of the smaller (round
// half to even; at most the last), and every tensor of it is the smaller one's tiled periodically over the larger
// shape with the original placed in the middle,
//   big[r][c] = small[(r - (R - r0) / 2) mod r0][(c - (C - c0) / 2) mod c0]
// (r0 x c0 the smaller shape, R x C the larger, integer halves, mod into [0, r0)). Fused tensors
// tile part by part: a ModernBERT's Wqkv as its query, key and value blocks, its Wi as the
// input and gate halves. Tensors without a counterpart keep the larger model's fresh values: a
// ModernBERT's final norm (which ModernBERT's tiling leaves at its initial value), the pooler
// and NSP head when the smaller model has none.
#pragma once
#include <stddef.h>
#include "engine/model.h"

// Why the weights of a `small` model do not tile into a `big` one, written to why[size] as
// "FIELD is A in the checkpoint and B in the config (...)"; NULL when they do. The architecture,
// the vocabulary and which tensors have biases must be the same; every width and the layer
// count may only grow.
const char *model_tile_misfit(const bert_config *small, const bert_config *big, char *why, size_t size);
// The smaller model's layer that layer l of the larger starts from.
int model_tile_layer(int l, int small_layers, int big_layers);
// big_host[big->n_params] holds big's fresh weights on entry; every tensor with a counterpart
// in small (small_host[small->n_params]) is overwritten by the counterpart tiled. The configs
// must have passed model_tile_misfit.
void model_tile_weights(const bert_model *small, const float *small_host, const bert_model *big, float *big_host);
