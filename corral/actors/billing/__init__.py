"""Billing: the credits ledger, metering of running instances, end-user quotas.

The interface other parts code against (docs/api.md, "Credits, metering and quotas"):

- `require_run_allowance(platform, *, tenant_id, size, external_user_id, resource_type, resource_id=None)`
  before an instance is created (`resource_id` None) or started: 402
  INSUFFICIENT_CREDITS or 409 `QUOTA_*_EXCEEDED`;
- `meter_start(platform, *, tenant_id, resource_type, resource_id, size, user_id=None, external_user_id=None)`
  (or `meter_instance(platform, resource_type, row)` from an instance row) and
  `meter_stop(platform, *, resource_type, resource_id)` as an instance enters and
  leaves running (both idempotent);
- `BillingHooks` (the node's `billing_hooks`): `register_stopper(resource_type, stop)`,
  how to stop an instance when credits run out, and `register_inventory(resource_type,
  table=..., active_states=..., gone_states=...)`, where a kind's instances are counted
  against end-user quotas; each kind registers through the node at start;
- `record_ai_usage(platform, *, tenant_id, provider, model, input_tokens, output_tokens, ...)`.
"""

from . import store
from .ai import record_ai_usage
from .allowance import require_run_allowance
from .credits import (
    available_credits,
    get_balance,
    grant_credits,
    list_transactions,
    transaction_public,
    usage,
)
from .hooks import BillingHooks, Inventory
from .ledger import Ledger, Outcome, in_ledger
from .metering import (
    Metering,
    charge_tenant,
    meter_instance,
    meter_start,
    meter_stop,
    start_metering,
    stop_metering,
)
from .metering_handle import MeteringHandle
from .pricing import COMPUTE_CREDITS_PER_HOUR, CREDIT_EXPIRY_DAYS, hourly_credits
from .quotas import (
    LIMITS,
    check_quota,
    delete_quota,
    get_quota,
    put_quota,
    quota_public,
)
from .store import AccountRecord, MeterRecord, QuotaRecord, TransactionRecord, UsageRecord

__all__ = [
    "COMPUTE_CREDITS_PER_HOUR",
    "CREDIT_EXPIRY_DAYS",
    "LIMITS",
    "AccountRecord",
    "BillingHooks",
    "Inventory",
    "Ledger",
    "MeterRecord",
    "Metering",
    "MeteringHandle",
    "Outcome",
    "QuotaRecord",
    "TransactionRecord",
    "UsageRecord",
    "available_credits",
    "charge_tenant",
    "check_quota",
    "delete_quota",
    "get_balance",
    "get_quota",
    "grant_credits",
    "hourly_credits",
    "in_ledger",
    "list_transactions",
    "meter_instance",
    "meter_start",
    "meter_stop",
    "put_quota",
    "quota_public",
    "record_ai_usage",
    "require_run_allowance",
    "start_metering",
    "stop_metering",
    "store",
    "transaction_public",
    "usage",
]
