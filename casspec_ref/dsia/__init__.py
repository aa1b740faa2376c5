"""DSIA (docs/method.md §2), the target as a family of virtual drafts. Reading order: the plan
builders (`layer_sparsity`, `early_exit`, `act_quant`, `precision`), `compose`, `virtual_draft`
(plans on scratch rows of the target's cache), the forward-free `prompt_lookup` and `recycle`."""
