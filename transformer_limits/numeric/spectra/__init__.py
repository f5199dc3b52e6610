"""Paper C (docs/theory.md §C): covariance spectra, Rényi effective ranks and token-frequency strata.
"""
