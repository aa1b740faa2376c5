"""DSIA (docs/method.md §2): the target model as a family of virtual draft models.

Reading order: one strategy per module, each building an `ExecutionPlan` (`layer_sparsity`,
`early_exit`, `act_quant`, `precision`); `compose` stacks them into hierarchies; `virtual_draft`
runs a plan on scratch rows of the target's cache; `prompt_lookup` and `recycle` draft with no
forward. Measured in docs/dsia.md.
"""
