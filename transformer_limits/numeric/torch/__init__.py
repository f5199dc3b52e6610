"""PyTorch-only parts of paper C (optional extra): the toy GPT and the torch optimizers.  Imported by
module path, never by ``transformer_limits.numeric``'s lazy API, so the rest works without PyTorch.
"""
