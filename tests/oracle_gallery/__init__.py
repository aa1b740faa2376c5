"""A gallery of outside-style implementations, each labelled with its truth (see TRUTH in each
module and tests/test_oracle_gallery.py). They are written here in the idioms of real projects
(textbook numpy, Hugging Face transformers, vLLM, Medusa, SpecInfer, EAGLE), not copied from
them, and they draw their randomness as those projects do: the oracle's adapters route it."""
