"""DSIA (docs/method.md §2): the target model as a family of virtual draft models. Reading
order: the strategies, each building an `ExecutionPlan` (`layer_sparsity`, `early_exit`,
`act_quant`, `precision`); `compose` (hierarchies); `virtual_draft` (running a plan on scratch
rows of the target's cache); `prompt_lookup` and `recycle` (drafts with no forward)."""
