"""Faster implementations of what the core computes, chosen per machine.

Nothing here changes what CAS-Spec computes; a student can read the method without it.
- `kernel_table`: measures which exact form of each matmul (`casspec_ref.base.kernels.Form`)
  runs fastest on this machine, caches the choice per machine and installs it at model load;
- `int8`: real int8 kernels for the W8A8 draft (`Int8Kernel`, `int8_plan`), the fast
  counterpart of the readable fake-quant `casspec_ref.dsia.act_quant.QuantKernel`;
- `static_forward`: every forward at one width over the whole static cache, its inputs in static
  buffers, captured as CUDA graphs on a GPU (`StaticModel`).

This layer imports only the core; the loaders (`casspec_ref.io`) and tools may import it.
"""
