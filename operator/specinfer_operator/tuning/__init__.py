"""Choosing K from what was measured: the recommendation (which K serves the most tokens per second), Auto's
state machine over status.tuning, and the K it applied (the annotation that hands it to the reconcile loop).

May import: api, measure, platform.
"""
