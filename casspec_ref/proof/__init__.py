"""Proof tooling: the exact-law oracle and the checker for other implementations.

Modules, in reading order: `enumerate` (exact laws by enumerating every draw), `harness` (toy
models, drafted trees, plain AR laws), `adapters` (torch/numpy/`random` draws as exact
decisions), `cases` (the catalogue), `checker` (chain, tree and loop checks, the CLI),
`replicas` (demonstration targets), `vectors` (JSON test vectors). Depends on the core, never
the other way.
"""

from casspec_ref.proof.adapters import (
    Draws,
    LazyUniform,
    RoutedGenerator,
    UnfollowableDrawError,
    lazy_uniform,
    route_all,
    route_numpy,
    route_random,
    route_torch,
)
from casspec_ref.proof.cases import (
    CheckCase,
    LoopCase,
    TreeCase,
    default_cases,
    loop_cases,
    rational_process,
    select_cases,
    tree_cases,
)
from casspec_ref.proof.checker import (
    TOLERANCE_PRESETS,
    ChainInputs,
    ChainVerifier,
    CheckReport,
    GenerateFunction,
    ToyModel,
    TreeInputs,
    TreeVerifierFunction,
    add_oracle_arguments,
    check_loop,
    check_tree_verifier,
    check_verifier,
    first_difference,
    run_check_command,
    run_oracle_args,
)
from casspec_ref.proof.enumerate import (
    EnumeratingSource,
    HiddenRandomnessError,
    Law,
    NonDeterministicFunctionError,
    NotCheckableError,
    exact_law,
    total_variation,
)
from casspec_ref.proof.harness import (
    ChildSpec,
    DraftSpec,
    ToyLM,
    TreeVerifier,
    ar_law,
    casspec_tree_verifier,
    draft_tree,
    spec_depth,
    speculative_tokens,
)
from casspec_ref.proof.replicas import (
    raw_bonus_replica,
    reference_chain_verifier,
    reference_tree_verifier,
)
from casspec_ref.proof.vectors import (
    VECTORS_FORMAT,
    VECTORS_PATH,
    build_vectors,
    load_vectors,
    tree_from_json,
    write_vectors,
)

__all__ = [
    "TOLERANCE_PRESETS", "VECTORS_FORMAT", "VECTORS_PATH", "ChainInputs", "ChainVerifier",
    "CheckCase", "CheckReport", "ChildSpec", "DraftSpec", "Draws", "EnumeratingSource",
    "GenerateFunction", "HiddenRandomnessError", "Law", "LazyUniform", "LoopCase",
    "NonDeterministicFunctionError", "NotCheckableError", "RoutedGenerator", "ToyLM",
    "ToyModel", "TreeCase", "TreeInputs", "TreeVerifier", "TreeVerifierFunction",
    "UnfollowableDrawError", "add_oracle_arguments", "ar_law", "build_vectors",
    "casspec_tree_verifier", "check_loop", "check_tree_verifier", "check_verifier",
    "default_cases", "draft_tree", "exact_law", "first_difference", "lazy_uniform",
    "load_vectors", "loop_cases", "rational_process", "raw_bonus_replica",
    "reference_chain_verifier", "reference_tree_verifier", "route_all", "route_numpy",
    "route_random", "route_torch", "run_check_command", "run_oracle_args", "select_cases",
    "spec_depth", "speculative_tokens", "total_variation", "tree_cases", "tree_from_json",
    "write_vectors",
]  # fmt: skip
