"""TLS/SASL suites. A package so that its conftest imports as tls.conftest (see conftest.py)."""
