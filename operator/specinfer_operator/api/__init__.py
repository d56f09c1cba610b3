"""The SpeculativeInference API: the resource's schema and its status schema (what `kubectl explain` reads),
the tenant policy, the engine releases an image runs and the known traps (admission rules and warnings), the
labels and annotations the operator writes, and the CRD generated from all of them.

May import: specinfer_runtime (the engine's schema and rules). Everything else in the operator imports it.
"""
