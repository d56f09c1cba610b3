"""The telemetry loop: scrape every resource's engines on a schedule, window the counters, publish the
figures into status, hand the canary's figures to the controller (Refreshes.judge_canary) and tuning
decisions to the reconcile loop (tuning.applied.apply).

May import: api, measure, render, platform, tuning, controller.
"""
