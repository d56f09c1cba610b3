"""The reconcile loop: a spec change is reconciled (reconcile.py), a child event refreshes the status
(refresh.py), and both arrange which workloads run which configuration (arrangement.py: the rollout with its
canary and rollback) and publish the status they compute (conditions.py, publish.py).

May import: api, render, platform, tuning, learning.
"""
