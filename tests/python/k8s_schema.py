# SPDX-License-Identifier: Apache-2.0
"""An offline check of Kubernetes manifests: the fields of the objects
etc/k8s/ uses, with their types, required fields and enumerations, as the
Kubernetes API (v1.28 reference) defines them, and strict about fields it
does not know (as `kubeconform -strict` would be).

Why not a real validator: Debian 12 packages none that runs without a
cluster (no kubeconform or kubeval; its kubectl 1.20 needs the API server's
discovery even for --dry-run=client), and this machine reaches no network
but Debian's archive. So this covers only the kinds and fields etc/k8s/
uses; a field it does not know is an error to fix here or there, never
ignored.

validate(doc) returns a list of "path: problem" strings, empty when valid.
"""

import re

# ---- schema language --------------------------------------------------------


class Obj:
    def __init__(self, fields, required=(), one_of=None):
        self.fields = fields
        self.required = set(required)
        self.one_of = one_of  # exactly one of these fields must be set


class List:
    def __init__(self, item):
        self.item = item


class Enum:
    def __init__(self, *values):
        self.values = set(values)


class Pattern:
    def __init__(self, regex, what):
        self.regex = re.compile(regex)
        self.what = what


STR, INT, BOOL = str, int, bool
MAP = "map of strings"
QUANTITY = Pattern(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$", "a quantity")
INT_OR_STR = "int or string"
DNS_LABEL = Pattern(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", "a DNS-1123 label")
DNS_SUBDOMAIN = Pattern(r"^(?=.{1,253}$)[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$", "a DNS-1123 subdomain")
PORT = "port"
# resources.requests and limits: any resource name, each a quantity.
RESOURCE_MAP = "resource map"

META = Obj(
    {"name": DNS_SUBDOMAIN, "namespace": DNS_LABEL, "labels": MAP, "annotations": MAP},
    required=["name"],
)
LABEL_SELECTOR = Obj(
    {
        "matchLabels": MAP,
        "matchExpressions": List(
            Obj({"key": STR, "operator": Enum("In", "NotIn", "Exists", "DoesNotExist"), "values": List(STR)},
                required=["key", "operator"])
        ),
    }
)
SECCOMP = Obj({"type": Enum("RuntimeDefault", "Localhost", "Unconfined"), "localhostProfile": STR}, required=["type"])
CAPS = Obj({"add": List(STR), "drop": List(STR)})
CONTAINER_SECURITY = Obj(
    {
        "runAsUser": INT,
        "runAsGroup": INT,
        "runAsNonRoot": BOOL,
        "privileged": BOOL,
        "allowPrivilegeEscalation": BOOL,
        "readOnlyRootFilesystem": BOOL,
        "capabilities": CAPS,
        "seccompProfile": SECCOMP,
        "procMount": Enum("Default", "Unmasked"),
    }
)
POD_SECURITY = Obj(
    {
        "runAsUser": INT,
        "runAsGroup": INT,
        "runAsNonRoot": BOOL,
        "supplementalGroups": List(INT),
        "fsGroup": INT,
        "seccompProfile": SECCOMP,
    }
)
HANDLER_FIELDS = {
    "exec": Obj({"command": List(STR)}, required=["command"]),
    "httpGet": Obj(
        {"path": STR, "port": PORT, "host": STR, "scheme": Enum("HTTP", "HTTPS"),
         "httpHeaders": List(Obj({"name": STR, "value": STR}, required=["name", "value"]))},
        required=["port"],
    ),
    "tcpSocket": Obj({"port": PORT, "host": STR}, required=["port"]),
    "grpc": Obj({"port": INT, "service": STR}, required=["port"]),
}
PROBE = Obj(
    dict(
        HANDLER_FIELDS,
        initialDelaySeconds=INT,
        periodSeconds=INT,
        timeoutSeconds=INT,
        successThreshold=INT,
        failureThreshold=INT,
        terminationGracePeriodSeconds=INT,
    ),
    one_of=list(HANDLER_FIELDS),
)
ENV = Obj(
    {
        "name": STR,
        "value": STR,
        "valueFrom": Obj(
            {
                "fieldRef": Obj({"fieldPath": STR, "apiVersion": STR}, required=["fieldPath"]),
                "configMapKeyRef": Obj({"name": STR, "key": STR, "optional": BOOL}, required=["key"]),
            },
            one_of=["fieldRef", "configMapKeyRef"],
        ),
    },
    required=["name"],
)
CONTAINER = Obj(
    {
        "name": DNS_LABEL,
        "image": STR,
        "imagePullPolicy": Enum("Always", "IfNotPresent", "Never"),
        "command": List(STR),
        "args": List(STR),
        "workingDir": STR,
        "env": List(ENV),
        "ports": List(
            Obj({"name": Pattern(r"^[a-z0-9-]{1,15}$", "an IANA service name"), "containerPort": PORT,
                 "hostPort": PORT, "protocol": Enum("TCP", "UDP", "SCTP")},
                required=["containerPort"])
        ),
        "resources": Obj({"requests": RESOURCE_MAP, "limits": RESOURCE_MAP,
                          "claims": List(Obj({"name": STR}, required=["name"]))}),
        "securityContext": CONTAINER_SECURITY,
        "startupProbe": PROBE,
        "livenessProbe": PROBE,
        "readinessProbe": PROBE,
        "volumeMounts": List(
            Obj({"name": STR, "mountPath": STR, "readOnly": BOOL, "subPath": STR,
                 "mountPropagation": Enum("None", "HostToContainer", "Bidirectional")},
                required=["name", "mountPath"])
        ),
    },
    required=["name", "image"],
)
VOLUME_SOURCES = {
    "hostPath": Obj(
        {"path": STR, "type": Enum("", "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket",
                                   "CharDevice", "BlockDevice")},
        required=["path"],
    ),
    "configMap": Obj(
        {"name": STR, "defaultMode": INT, "optional": BOOL,
         "items": List(Obj({"key": STR, "path": STR, "mode": INT}, required=["key", "path"]))},
    ),
    "emptyDir": Obj({"medium": Enum("", "Memory"), "sizeLimit": QUANTITY}),
}
VOLUME = Obj(dict(VOLUME_SOURCES, name=DNS_LABEL), required=["name"], one_of=list(VOLUME_SOURCES))
TOLERATION = Obj(
    {"key": STR, "operator": Enum("Exists", "Equal"), "value": STR,
     "effect": Enum("NoSchedule", "PreferNoSchedule", "NoExecute"), "tolerationSeconds": INT}
)
POD_SPEC = Obj(
    {
        "containers": List(CONTAINER),
        "initContainers": List(CONTAINER),
        "volumes": List(VOLUME),
        "nodeSelector": MAP,
        "tolerations": List(TOLERATION),
        "runtimeClassName": DNS_SUBDOMAIN,
        "hostPID": BOOL,
        "hostIPC": BOOL,
        "hostNetwork": BOOL,
        "priorityClassName": STR,
        "terminationGracePeriodSeconds": INT,
        "automountServiceAccountToken": BOOL,
        "enableServiceLinks": BOOL,
        "serviceAccountName": DNS_SUBDOMAIN,
        "restartPolicy": Enum("Always", "OnFailure", "Never"),
        "securityContext": POD_SECURITY,
        "dnsPolicy": Enum("ClusterFirst", "ClusterFirstWithHostNet", "Default", "None"),
    },
    required=["containers"],
)
POD_TEMPLATE = Obj({"metadata": Obj(META.fields), "spec": POD_SPEC}, required=["spec"])
DAEMONSET_SPEC = Obj(
    {
        "selector": LABEL_SELECTOR,
        "template": POD_TEMPLATE,
        "updateStrategy": Obj(
            {"type": Enum("RollingUpdate", "OnDelete"),
             "rollingUpdate": Obj({"maxUnavailable": INT_OR_STR, "maxSurge": INT_OR_STR})}
        ),
        "minReadySeconds": INT,
        "revisionHistoryLimit": INT,
    },
    required=["selector", "template"],
)
POLICY_RULE = Obj(
    {"apiGroups": List(STR), "resources": List(STR), "verbs": List(STR), "resourceNames": List(STR),
     "nonResourceURLs": List(STR)},
    required=["verbs"],
)
SUBJECT = Obj({"kind": Enum("User", "Group", "ServiceAccount"), "name": STR, "namespace": STR, "apiGroup": STR},
              required=["kind", "name"])
ROLE_REF = Obj({"apiGroup": Enum("rbac.authorization.k8s.io"), "kind": Enum("Role", "ClusterRole"), "name": STR},
               required=["apiGroup", "kind", "name"])

# (apiVersion, kind) -> (schema of the whole object, namespaced)
KINDS = {
    ("v1", "Namespace"): (Obj({"metadata": META}), False),
    ("v1", "ConfigMap"): (Obj({"metadata": META, "data": MAP, "immutable": BOOL}), True),
    ("v1", "ServiceAccount"): (Obj({"metadata": META, "automountServiceAccountToken": BOOL}), True),
    ("v1", "Pod"): (Obj({"metadata": META, "spec": POD_SPEC}, required=["spec"]), True),
    ("apps/v1", "DaemonSet"): (Obj({"metadata": META, "spec": DAEMONSET_SPEC}, required=["spec"]), True),
    ("rbac.authorization.k8s.io/v1", "Role"): (Obj({"metadata": META, "rules": List(POLICY_RULE)}), True),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): (
        Obj({"metadata": META, "subjects": List(SUBJECT), "roleRef": ROLE_REF}, required=["roleRef"]),
        True,
    ),
}

# ---- the walk ---------------------------------------------------------------


def _check(value, schema, path, errs):
    if isinstance(schema, Obj):
        if not isinstance(value, dict):
            errs.append(f"{path}: want an object, have {type(value).__name__}")
            return
        for k in sorted(schema.required - set(value)):
            errs.append(f"{path}.{k}: required")
        for k, v in value.items():
            if k not in schema.fields:
                errs.append(f"{path}.{k}: unknown field")
                continue
            _check(v, schema.fields[k], f"{path}.{k}", errs)
        if schema.one_of is not None:
            have = [k for k in schema.one_of if k in value]
            if len(have) != 1:
                errs.append(f"{path}: want exactly one of {', '.join(schema.one_of)}, have {have or 'none'}")
    elif isinstance(schema, List):
        if not isinstance(value, list):
            errs.append(f"{path}: want a list, have {type(value).__name__}")
            return
        for i, v in enumerate(value):
            _check(v, schema.item, f"{path}[{i}]", errs)
    elif isinstance(schema, Enum):
        if value not in schema.values:
            errs.append(f"{path}: {value!r} is not one of {sorted(schema.values)}")
    elif isinstance(schema, Pattern):
        if isinstance(value, int) and not isinstance(value, bool) and schema is QUANTITY:
            return
        if not isinstance(value, str) or not schema.regex.match(value):
            errs.append(f"{path}: {value!r} is not {schema.what}")
    elif schema == MAP:
        if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
            errs.append(f"{path}: want a map of strings to strings (quote numbers and booleans)")
    elif schema == RESOURCE_MAP:
        if not isinstance(value, dict):
            errs.append(f"{path}: want a map of resources")
            return
        for k, v in value.items():
            _check(v, QUANTITY, f"{path}.{k}", errs)
    elif schema == INT_OR_STR:
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            errs.append(f"{path}: want an int or a string")
        elif isinstance(value, str) and not re.match(r"^[0-9]+%$", value):
            errs.append(f"{path}: {value!r}: a string here is a percentage")
    elif schema == PORT:
        if isinstance(value, bool) or not (
            (isinstance(value, int) and 1 <= value <= 65535)
            or (isinstance(value, str) and re.match(r"^[a-z0-9-]{1,15}$", value))
        ):
            errs.append(f"{path}: {value!r} is not a port (1-65535) or a port name")
    elif schema in (STR, INT, BOOL):
        ok = isinstance(value, schema) and not (schema is INT and isinstance(value, bool))
        if not ok:
            errs.append(f"{path}: want {schema.__name__}, have {type(value).__name__} {value!r}")
    else:
        raise AssertionError(f"bad schema at {path}: {schema!r}")


def validate(doc):
    """Problems of one manifest object, as "path: problem" strings."""
    if not isinstance(doc, dict):
        return ["the document is not an object"]
    api, kind = doc.get("apiVersion"), doc.get("kind")
    if (api, kind) not in KINDS:
        return [f"unknown apiVersion/kind {api}/{kind}"]
    schema, namespaced = KINDS[(api, kind)]
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind")}
    errs = []
    if "metadata" not in body:
        errs.append(f"{kind}.metadata: required")
    _check(body, schema, kind, errs)
    meta = body.get("metadata") or {}
    if namespaced and "namespace" not in meta:
        errs.append(f"{kind}.metadata.namespace: a namespaced object without one lands wherever it is applied")
    if not namespaced and "namespace" in meta:
        errs.append(f"{kind}.metadata.namespace: {kind} is not namespaced")
    return errs
