"""Drafts that learn from the traffic they serve (spec.learning): which draft generation serves (the annotation
that hands it to the reconcile loop), when the next one is trained, and how each run and canary ended.

May import: api, render, platform.
"""
