"""Tenant policy cases of the pods' placement, settings and images, and of the Service (see policycases)."""

from __future__ import annotations

from typing import Any

from tests.support.policyspecs import CONTROL_PLANE, DIGEST, Refused, learning, overlay, sidecar

POD_CASES: list[tuple[str, dict[str, Any], dict[str, Any], Refused]] = [
    # Placement, scheduling, runtime class, grace period, AppArmor, Service type, NPU resource.
    (
        "a system priority class",
        {"placement": {"priorityClassName": "system-node-critical"}},
        {},
        "spec.placement.priorityClassName",
    ),
    ("a priority class of the cluster", {"placement": {"priorityClassName": "inference"}}, {}, None),
    (
        "a priority class not listed",
        {"placement": {"priorityClassName": "inference"}},
        {"allowedPriorityClasses": ["batch"]},
        "spec.placement.priorityClassName",
    ),
    (
        "a system priority class, listed",
        {"placement": {"priorityClassName": "system-cluster-critical"}},
        {"allowedPriorityClasses": ["system-cluster-critical"]},
        None,
    ),
    (
        "every taint tolerated on control-plane nodes",
        {"placement": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {CONTROL_PLANE: ""}}},
        {},
        ("spec.placement.tolerations", "spec.placement.nodeSelector"),
    ),
    (
        "every NoSchedule taint tolerated",
        {"placement": {"tolerations": [{"operator": "Exists", "effect": "NoSchedule"}]}},
        {},
        "spec.placement.tolerations",
    ),
    (
        "the control plane's taint tolerated",
        {"placement": {"tolerations": [{"key": "node-role.kubernetes.io/master", "operator": "Exists"}]}},
        {},
        "spec.placement.tolerations",
    ),
    (
        "control-plane nodes by affinity",
        {
            "placement": {
                "affinity": {
                    "nodeAffinity": {
                        "preferredDuringSchedulingIgnoredDuringExecution": [
                            {
                                "weight": 1,
                                "preference": {"matchExpressions": [{"key": CONTROL_PLANE, "operator": "Exists"}]},
                            }
                        ]
                    }
                }
            }
        },
        {},
        "spec.placement.affinity.nodeAffinity",
    ),
    (
        "away from control-plane nodes",
        {
            "placement": {
                "affinity": {
                    "nodeAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [
                                {"matchExpressions": [{"key": CONTROL_PLANE, "operator": "DoesNotExist"}]}
                            ]
                        }
                    }
                }
            }
        },
        {},
        None,
    ),
    (
        "NPU taints tolerated",
        {"placement": {"tolerations": [{"key": "huawei.com/Ascend910", "operator": "Exists", "effect": "NoSchedule"}]}},
        {},
        None,
    ),
    (
        "control-plane nodes, every taint tolerated as allowed",
        {"placement": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {CONTROL_PLANE: ""}}},
        {"tolerateAllTaintsAllowed": True},
        "spec.placement.nodeSelector",
    ),
    (
        "control-plane nodes, as allowed",
        {"placement": {"tolerations": [{"operator": "Exists"}], "nodeSelector": {CONTROL_PLANE: ""}}},
        {"tolerateAllTaintsAllowed": True, "controlPlaneAllowed": True},
        None,
    ),
    ("a runtime class", overlay(runtimeClassName="privileged-runc"), {}, "spec.podTemplate.spec.runtimeClassName"),
    ("a listed runtime class", overlay(runtimeClassName="ascend"), {"allowedRuntimeClasses": ["ascend"]}, None),
    ("another scheduler", {"placement": {"schedulerName": "my-scheduler"}}, {}, "spec.placement.schedulerName"),
    ("the default scheduler by name", {"placement": {"schedulerName": "default-scheduler"}}, {}, None),
    ("a listed scheduler", {"placement": {"schedulerName": "volcano"}}, {"allowedSchedulers": ["volcano"]}, None),
    (
        "an unconfined AppArmor profile for the engine",
        {
            "podTemplate": {
                "metadata": {"annotations": {"container.apparmor.security.beta.kubernetes.io/engine": "unconfined"}}
            }
        },
        {},
        "spec.podTemplate.metadata.annotations",
    ),
    (
        "the runtime's AppArmor profile",
        {
            "podTemplate": {
                "metadata": {
                    "annotations": {"container.apparmor.security.beta.kubernetes.io/engine": "runtime/default"}
                }
            }
        },
        {},
        None,
    ),
    (
        "an endless grace period",
        overlay(terminationGracePeriodSeconds=2**53 - 1),
        {},
        "spec.podTemplate.spec.terminationGracePeriodSeconds",
    ),
    ("a grace period of two minutes", overlay(terminationGracePeriodSeconds=120), {}, None),
    ("a LoadBalancer Service", {"service": {"type": "LoadBalancer"}}, {}, "spec.service.type"),
    ("a NodePort Service", {"service": {"type": "NodePort"}}, {}, "spec.service.type"),
    (
        "a LoadBalancer Service, allowed",
        {"service": {"type": "LoadBalancer"}},
        {"allowedServiceTypes": ["ClusterIP", "LoadBalancer"]},
        None,
    ),
    (
        "another extended resource",
        {"resources": {"npuResourceName": "example.com/anything"}},
        {},
        "spec.resources.npuResourceName",
    ),
    ("a budget that lets no pod go", {"disruptionBudget": {"maxUnavailable": 0}}, {}, "spec.disruptionBudget"),
    (
        "a budget that keeps every pod",
        {"disruptionBudget": {"minAvailable": 1}},
        {},
        "spec.disruptionBudget",
    ),
    ("a budget that lets one pod go", {"disruptionBudget": {"maxUnavailable": 1}}, {}, None),
    ("a budget of the default size", {"disruptionBudget": {}}, {}, None),
    ("a budget turned off", {"disruptionBudget": {"enabled": False, "maxUnavailable": 0}}, {}, None),
    (
        "a budget that lets no pod go, allowed",
        {"disruptionBudget": {"maxUnavailable": 0}},
        {"drainBlockingBudgetsAllowed": True},
        None,
    ),
    (
        "a pod Karpenter may not disrupt",
        {"podTemplate": {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}},
        {},
        "spec.podTemplate.metadata.annotations",
    ),
    (
        "a pod the cluster autoscaler may not evict",
        {"podTemplate": {"metadata": {"annotations": {"cluster-autoscaler.kubernetes.io/safe-to-evict": "False"}}}},
        {},
        "spec.podTemplate.metadata.annotations",
    ),
    (
        "pods that may be evicted, said so",
        {
            "podTemplate": {
                "metadata": {
                    "annotations": {
                        "karpenter.sh/do-not-disrupt": "false",
                        "cluster-autoscaler.kubernetes.io/safe-to-evict": "true",
                    }
                }
            }
        },
        {},
        None,
    ),
    (
        "a pod Karpenter may not disrupt, allowed",
        {"podTemplate": {"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}}},
        {"drainBlockingBudgetsAllowed": True},
        None,
    ),
    ("an Ascend 310P", {"resources": {"npuResourceName": "huawei.com/Ascend310P"}}, {}, None),
    # Learning: off by default (served prompts are the tenant's), on where the policy opts in; the training image
    # is an image like the engine's.
    ("a draft that learns", learning(), {}, "spec.learning"),
    ("a draft that learns, learning allowed", learning(), {"learningAllowed": True}, None),
    (
        "a draft that learns, claims forbidden",
        learning(),
        {"learningAllowed": True, "allowedVolumeTypes": ["emptyDir"]},
        "spec.learning",
    ),
    (
        "a training image outside the prefix",
        learning(image="registry.example.com/ml-evil/trainer:1"),
        {"learningAllowed": True, "allowedImagePrefixes": ["registry.example.com/ml"]},
        "spec.runtime.image",
    ),
    (
        "a training image under the prefix",
        learning(image="registry.example.com/ml/trainer:1"),
        {"learningAllowed": True, "allowedImagePrefixes": ["registry.example.com/ml"]},
        None,
    ),
    # Image references are parsed before a prefix is compared.
    (
        "an image that climbs out of the prefix",
        {"runtime": {"image": "registry.example.com/ml/../../evil:1"}},
        {"allowedImagePrefixes": ["registry.example.com/ml/"]},
        "spec.runtime.image",
    ),
    (
        "an image with an empty path component",
        {"runtime": {"image": "registry.example.com/ml//evil:1"}},
        {"allowedImagePrefixes": ["registry.example.com/ml/"]},
        "spec.runtime.image",
    ),
    (
        "a sidecar image next to the prefix",
        overlay(containers=[sidecar(image="registry.example.com/ml-evil/s:1")]),
        {"allowedImagePrefixes": ["registry.example.com/ml"]},
        "spec.runtime.image",
    ),
    (
        "a registry whose name extends the prefix",
        {"runtime": {"image": "registry.example.com.evil.io/ml/x:1"}},
        {"allowedImagePrefixes": ["registry.example.com"]},
        "spec.runtime.image",
    ),
    (
        "another port of the registry",
        {"runtime": {"image": "registry.example.com:5000/ml/x:1"}},
        {"allowedImagePrefixes": ["registry.example.com"]},
        "spec.runtime.image",
    ),
    (
        "images under a prefix without a slash",
        {
            "runtime": {"image": f"registry.example.com/ml/x:1@{DIGEST}"},
            **overlay(containers=[sidecar(image="registry.example.com/ml:2")]),
        },
        {"allowedImagePrefixes": ["registry.example.com/ml"]},
        None,
    ),
    *(
        (
            f"a malformed image reference: {why}",
            {"runtime": {"image": image}},
            {"allowedImagePrefixes": ["r.example.com/"]},
            "spec.runtime.image",
        )
        for why, image in (
            ("capitals in the path", "r.example.com/ml/Evil:1"),
            ("an empty tag", "r.example.com/ml/x:"),
            ("a short digest", "r.example.com/ml/x@sha256:0123"),
            ("a separator at the end of a component", "r.example.com/ml-/x:1"),
        )
    ),
    (
        "an image by digest, under a registry's prefix",
        {"runtime": {"image": f"r.example.com/ml/x@{DIGEST}"}},
        {"allowedImagePrefixes": ["r.example.com/"]},
        None,
    ),
]
