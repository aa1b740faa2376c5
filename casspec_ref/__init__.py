"""casspec_ref: a pedagogical pure-PyTorch reference implementation of CAS-Spec."""

__version__ = "0.1.0"
