"""The `specinfer-operator` process: its flags, the kopf handlers that feed both loops, metrics, health and
leader election, wired together once.

May import: api, measure, render, platform, tuning, controller, telemetry, learning.
"""
