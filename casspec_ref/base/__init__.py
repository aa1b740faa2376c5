"""What the core stands on but does not teach: argument checks and the exact matmul forms.

Nothing here knows CAS-Spec, and nothing here imports the rest of the package: the core
(`casspec_ref` top level and `casspec_ref.dsia`) calls these helpers so that its own lines can
stay on the method.
"""
