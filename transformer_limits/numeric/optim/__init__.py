"""Optimizers in NumPy: AdamW and blockwise AdamW with their parameter box (docs/adamw.md), Muon,
NorMuon, Dion and Lion (paper C).
"""
