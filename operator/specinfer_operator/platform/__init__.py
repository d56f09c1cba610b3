"""What the operator stands on: the Kubernetes API client, the operator's Prometheus metrics, leader
election, the debounced work queue, and ownership (which resource made an object).

May import: api.
"""
