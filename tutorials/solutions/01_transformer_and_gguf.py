# Solutions to the exercises of 01_transformer_and_gguf.ipynb.
# Each section replaces the notebook cell tagged exercise:NAME (see tutorials/exercises.py).

# %% exercise: parameters
def my_parameter_count(config):
    d, kv = config.d_model, config.n_kv_heads * config.head_dim
    attention = d * d + 2 * d * kv + d * d  # q, k, v, o (no biases)
    mlp = 3 * d * config.d_ff  # gate, up, down
    block = attention + mlp + 2 * d  # + the two RMSNorm weights
    embedding = config.vocab_size * d
    head = 0 if config.tie_embeddings else config.vocab_size * d
    return embedding + config.n_layers * block + d + head  # + the final norm

# %% exercise: causality
changed = tokens.clone()
changed[0, 2] = (int(tokens[0, 2]) + 1) % config.vocab_size
difference = (tiny.forward(changed) - tiny.forward(tokens)).abs().amax(dim=-1)[0]  # (T,)
changed_positions = [i for i, d in enumerate(difference.tolist()) if d > 0]
