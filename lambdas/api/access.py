"""Who may call which REST route, as the authorizer and the handlers import it: :mod:`contracts.access`."""

from contracts.access import ADMIN, AGENT, CUSTOMER, ROLES, ROUTES, Route, route, routes_for

__all__ = ["ADMIN", "AGENT", "CUSTOMER", "ROLES", "ROUTES", "Route", "route", "routes_for"]
