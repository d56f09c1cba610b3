"""Local Kubernetes control plane on loopback with kwok-simulated Ascend NPU nodes (run as hack/cluster).

Python 3 standard library only: hack/cluster runs it with the system python3, before the repository's venv
exists. The modules, in the order they depend on each other:

  console     log lines and fatal errors
  layout      where things live (cache, binaries, state dirs) and which versions run (hack/versions.env)
  kubeapi     TLS contexts and the small HTTP client for the API server and health endpoints
  pki         openssl keys and certificates, kubeconfigs
  processes   one process per component: start, stop, pidfiles, logs, waiting
  nodes       the fake Ascend nodes, their pod CIDRs, and kwok that simulates them
  lws         LeaderWorkerSet: its controller's configuration, CRDs and admission webhooks
  components  the control plane's components: their ports (cluster.json), argv and health checks
  cli         the commands of hack/cluster: up, down, status, env, kubeconfig, fake-nodes, lws
"""
