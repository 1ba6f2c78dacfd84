"""Differential testing: zigcorn's reading of HTTP/1.1 beside reference servers' readings
(``python -m tests.support.differential --help``), and zigcorn behind front proxies
(``proxies.py``). See docs/security.md, "Differential testing"."""
