"""Example plugin for transformer_limits: Euler–Maruyama's strong order on geometric Brownian motion.

Importing :mod:`em_gbm_example.experiment` registers the experiments (see ``README.md`` one folder up).
"""
