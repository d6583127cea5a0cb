"""What a custom domain's name may be (spec: RFC 1123 hostname, at most 253
characters, globally unique, not under the service's own domain).

The name is compared and stored lowercased without a final dot. Wildcards, ports,
schemes, paths, IP addresses and single labels are refused with 422
`VALIDATION_ERROR` naming the problem; an absent or empty `domain` is 400
`MISSING_PARAM`.
"""

from __future__ import annotations

import re
from typing import Any

from corral.errors import ApiError, missing_param, validation_error

MAX_LENGTH = 253
LABEL = "[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?"
_LABEL = re.compile(LABEL)
FQDN = f"(?:{LABEL}\\.)+(?![0-9]+$){LABEL}"
"""What `normalize_fqdn` accepts, lowercased and without the final dot (but for the
service's own domain), as a `pattern`."""


def invalid(reason: str) -> ApiError:
    return validation_error({"domain": reason}, f"domain {reason}")


def normalize_fqdn(value: Any, service_domain: str) -> str:
    """`value` as a custom domain's FQDN, or the spec's 400/422."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise missing_param("domain")
    if not isinstance(value, str):
        raise invalid("must be a string")
    fqdn = value.strip().lower()
    if "://" in fqdn:
        raise invalid("must be a host name, without a scheme (give app.example.com, not https://app.example.com)")
    if "*" in fqdn:
        raise invalid("must not be a wildcard")
    if any(c in fqdn for c in "/?#@ "):
        raise invalid("must be a host name, without a path")
    if ":" in fqdn:
        raise invalid("must not include a port")
    fqdn = fqdn[:-1] if fqdn.endswith(".") else fqdn
    if len(fqdn) > MAX_LENGTH:
        raise invalid(f"must be at most {MAX_LENGTH} characters")
    labels = fqdn.split(".")
    if len(labels) < 2:
        raise invalid("must be a fully qualified domain name such as app.example.com")
    if not all(_LABEL.fullmatch(label) for label in labels):
        raise invalid("must be an RFC 1123 host name: labels of 1-63 letters, digits and inner hyphens")
    if labels[-1].isdigit():
        raise invalid("must be a host name, not an IP address")
    own = service_domain.lower().rstrip(".")
    if fqdn == own or fqdn.endswith("." + own):
        raise invalid(f"must not end with the service's own domain {own}")
    return fqdn
