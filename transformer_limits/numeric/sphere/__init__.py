"""Paper B (docs/theory.md §B): the sphere transformer, its MLP field kernels, the common-noise SDE and
simulated Lyapunov exponents.
"""
