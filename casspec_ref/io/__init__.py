"""Loading: checkpoints (GGUF, safetensors, Hugging Face directories), the tokenizer, and the
per-checkpoint draft presets attached at load. Depends on the core, never the other way."""
