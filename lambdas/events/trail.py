"""The fields of the trail's lines, as the router's tests import them: defined in :mod:`contracts.trail`."""

from contracts.trail import ANALYTICS_ATTRIBUTES, ANALYTICS_FIELDS, AUDIT_FIELDS

__all__ = ["ANALYTICS_ATTRIBUTES", "ANALYTICS_FIELDS", "AUDIT_FIELDS"]
