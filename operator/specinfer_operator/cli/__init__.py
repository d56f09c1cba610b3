"""The `specinfer` command: validate and render manifests as a GitOps repository holds them, print the CRD or
an editor schema, recommend K for engines the operator does not run.

May import: api, measure, render, platform, tuning.
"""
