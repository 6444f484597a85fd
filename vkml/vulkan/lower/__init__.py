"""Lowering: one module per kernel family named in the registry (OpSpec.kernel).

Each module has `lower(node, input_views, output_view, ctx)` and may have
`scratch_bytes(node)` for temporary device memory the executor plans for it.
"""
