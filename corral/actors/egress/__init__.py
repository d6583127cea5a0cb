"""Egress security (issue 15): the vault, bindings, policies, allowlist rules and audit.

Modules, one job each:

- `store`: every query, over the tables of migration 0012, as frozen records;
- `spec`: request bodies (secret, binding, policy, rule) with the specification's codes;
- `resources`: the sandboxes and computers a binding or policy names, and scopes;
- `vault`: secrets sealed with AES-GCM, bindings and their `svc-tok-` placeholders,
  the placeholder env of an instance, the plaintext secrets the proxy may substitute;
- `policies`: the tenant default and per-resource policies, allowlist rules;
- `decision`: the pure allow/reject function (priority, specificity, warn_only);
- `substitution`: the pure placeholder substitution and the response scrubber;
- `audit`: audit rows (record, query, suggestions, retention);
- `proxy_api`: the interface the egress proxy calls (`load_context`, `evaluate`,
  `record_request`, `denied_body`);
- `proxy_hooks`: the node's proxy hooks over all of that (`PolicyHooks`);
- `cleanup`: a resource's bindings and policy go with it;
- `oauth`: OAuth connect (operator and tenant providers, PKCE flows, the callback
  that stores an `oauth_connect` secret);
- `services`: what the package needs of its node.
"""

from .audit import (
    DEFAULT_LIMIT,
    EVENT_TYPE,
    MAX_LIMIT,
    RETENTION_DAYS,
    AuditEntry,
    AuditQuery,
    audit_public,
    get_audit,
    parse_query,
    prune,
    query_audit,
    record_request,
    suggestions,
)
from .cleanup import forget_gone_resources
from .decision import Decision, Request, decide, host_matches
from .oauth import (
    CallbackError,
    FlowRecord,
    NewProvider,
    OAuthStart,
    Provider,
    ProvidersFileError,
    callback,
    check_operator_providers,
    delete_provider,
    flow_public,
    flow_status,
    provider_public,
    providers_of,
    register_provider,
)
from .oauth import start as start_oauth
from .policies import (
    create_policy,
    create_rule,
    delete_rule,
    effective_policy,
    get_policy,
    get_rule,
    policies_of,
    policy_public,
    rule_public,
    rules_of,
    tenant_default,
    update_policy,
)
from .proxy_api import (
    EgressContext,
    Verdict,
    denied_body,
    evaluate,
    load_context,
    load_context_for_instance,
)
from .proxy_hooks import PolicyHooks
from .resources import Resource, ResourceIdentity, find_resource, in_scope
from .services import EgressServices
from .spec import NewBinding, NewPolicy, NewRule, NewSecret, PolicyChange, SecretChange
from .store import AuditRecord, BindingRecord, PolicyRecord, RuleRecord, SecretRecord
from .substitution import BoundSecret, Scrubber, Substitution, substitute
from .vault import (
    Caller,
    binding_public,
    bindings_of,
    bound_secrets,
    create_binding,
    create_secret,
    delete_binding,
    delete_secret,
    get_binding,
    get_secret,
    placeholder_env,
    secret_public,
    secrets_of,
    update_secret,
)

__all__ = [
    "DEFAULT_LIMIT",
    "EVENT_TYPE",
    "MAX_LIMIT",
    "RETENTION_DAYS",
    "AuditEntry",
    "AuditQuery",
    "AuditRecord",
    "BindingRecord",
    "BoundSecret",
    "CallbackError",
    "Caller",
    "Decision",
    "EgressContext",
    "EgressServices",
    "FlowRecord",
    "NewBinding",
    "NewPolicy",
    "NewProvider",
    "NewRule",
    "NewSecret",
    "OAuthStart",
    "PolicyChange",
    "PolicyHooks",
    "PolicyRecord",
    "Provider",
    "ProvidersFileError",
    "Request",
    "Resource",
    "ResourceIdentity",
    "RuleRecord",
    "Scrubber",
    "SecretChange",
    "SecretRecord",
    "Substitution",
    "Verdict",
    "audit_public",
    "binding_public",
    "bindings_of",
    "bound_secrets",
    "callback",
    "check_operator_providers",
    "create_binding",
    "create_policy",
    "create_rule",
    "create_secret",
    "decide",
    "delete_binding",
    "delete_provider",
    "delete_rule",
    "delete_secret",
    "denied_body",
    "effective_policy",
    "evaluate",
    "find_resource",
    "flow_public",
    "flow_status",
    "forget_gone_resources",
    "get_audit",
    "get_binding",
    "get_policy",
    "get_rule",
    "get_secret",
    "host_matches",
    "in_scope",
    "load_context",
    "load_context_for_instance",
    "parse_query",
    "placeholder_env",
    "policies_of",
    "policy_public",
    "provider_public",
    "providers_of",
    "prune",
    "query_audit",
    "record_request",
    "register_provider",
    "rule_public",
    "rules_of",
    "secret_public",
    "secrets_of",
    "start_oauth",
    "substitute",
    "suggestions",
    "tenant_default",
    "update_policy",
    "update_secret",
]
