"""A SpeculativeInference turned into objects (pure: same input, same objects): the admission check it must
pass first, the engine pod template, the workload that runs it (Deployment or LeaderWorkerSet), and the
other children (ConfigMap, Service, PodDisruptionBudget, InferencePool).

May import: api, specinfer_runtime.
"""
