"""Statistics of the verify layer, in one place: fits, intervals and hypothesis
tests that experiments call to turn sweep data into verdicts.  Experiments hold grids and verdict
calls; every estimator and interval lives here, with its own tests.
"""
