"""Paper A (docs/theory.md §A): generated attention kernels, the attention-only transformer and its
layer adjoint, losses, training with radii, the mean-field limit and the Lie-series flow expansion.
"""
