# Solutions to the exercises of 01_transformer_and_gguf.ipynb.
# Each "exercise" section replaces the notebook cell tagged exercise:NAME; each "wrong" section is
# a plausible wrong answer that the check must reject (see tutorials/exercises.py).
#
# Hints to the open questions at the end of the notebook:
# 1. Write R_t as a block-diagonal rotation by t*theta_i; R_s^T R_t = R_{t-s}.
# 2. The cache holds 2 * L * H_kv * D_head numbers per token; the ratio is H / H_kv.
# 3. Every position then sees every token: a change reaches all positions, and the law read at
#    position i depends on the drafted tokens after it.
# 4. Cast x to bfloat16 before the mean of squares; compare logits and the argmax of each position.
# 5. Skip the MLP branch of block 1 in my_block when the layer is in the skip set.

# %% exercise: parameters
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    attention = d * d + 2 * d * kv + d * d  # q, k, v, o (no biases)
    mlp = 3 * d * config.d_ff  # gate, up, down
    block = attention + mlp + 2 * d  # + the two RMSNorm weights
    embedding = config.vocab_size * d
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return embedding + config.n_layers * block + d + head  # + the final norm

# %% wrong: parameters: k and v as wide as q (grouped-query attention forgotten)
def my_parameter_count(config):
    d = config.d_model
    block = 4 * d * d + 3 * d * config.d_ff + 2 * d
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return config.vocab_size * d + config.n_layers * block + d + head

# %% wrong: parameters: the head always tied to the embedding
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    block = 2 * d * d + 2 * d * kv + 3 * d * config.d_ff + 2 * d
    return config.vocab_size * d + config.n_layers * block + d

# %% wrong: parameters: the RMSNorm weights forgotten
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    block = 2 * d * d + 2 * d * kv + 3 * d * config.d_ff
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return config.vocab_size * d + config.n_layers * block + head

# %% wrong: parameters: the tiny model's count copied from the page
def my_parameter_count(config):
    return 27_168

# %% wrong: parameters: the head counted even when it is tied to the embedding
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    block = 2 * d * d + 2 * d * kv + 3 * d * config.d_ff + 2 * d
    return 2 * config.vocab_size * d + config.n_layers * block + d

# %% wrong: parameters: the final norm forgotten
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    block = 2 * d * d + 2 * d * kv + 3 * d * config.d_ff + 2 * d
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return config.vocab_size * d + config.n_layers * block + head

# %% wrong: parameters: a two-matrix MLP (GPT-2's), the SwiGLU gate forgotten
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    block = 2 * d * d + 2 * d * kv + 2 * d * config.d_ff + 2 * d
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return config.vocab_size * d + config.n_layers * block + d + head

# %% exercise: causality
# The causality cell's pattern, with position 2 changed: `logits` is still the tiny model's
# logits for `tokens` (cell "A tiny model").
changed = tokens.clone()
changed[0, 2] = 40
difference = (tiny.forward(changed) - logits).abs().amax(dim=-1)[0]  # (T,)

# %% wrong: causality: the answer written by hand, not measured
changed = tokens.clone()
changed[0, 2] = (int(tokens[0, 2]) + 1) % config.vocab_size
difference = torch.tensor([0.0, 0.0, 1.0, 1.0, 1.0, 1.0], dtype=torch.float64)

# %% wrong: causality: the token at position 3 changed instead of 2
changed = tokens.clone()
changed[0, 3] = (int(tokens[0, 3]) + 1) % config.vocab_size
with torch.no_grad():
    difference = (tiny.forward(changed) - tiny.forward(tokens)).abs().amax(dim=-1)[0]

# %% wrong: causality: the change measured on probabilities, not logits
changed = tokens.clone()
changed[0, 2] = (int(tokens[0, 2]) + 1) % config.vocab_size
with torch.no_grad():
    difference = (tiny.forward(changed).softmax(-1) - tiny.forward(tokens).softmax(-1)).abs().amax(dim=-1)[0]

# %% wrong: causality: the list of positions instead of the measurement
changed = tokens.clone()
changed[0, 2] = (int(tokens[0, 2]) + 1) % config.vocab_size
difference = [2, 3, 4, 5]

# %% wrong: causality: the causality cell copied unchanged (the last token changed, not position 2)
changed = tokens.clone()
changed[0, -1] = 40
difference = (tiny.forward(changed) - logits).abs().amax(dim=-1)[0]

# %% wrong: causality: the sum over the vocabulary, not the max
changed = tokens.clone()
changed[0, 2] = 40
difference = (tiny.forward(changed) - logits).abs().sum(dim=-1)[0]

# %% wrong: causality: position 2 changed, but the causality cell's measurement `diff` reused
changed = tokens.clone()
changed[0, 2] = 40
difference = diff
