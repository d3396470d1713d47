"""Example plugins used end to end by the integration tests."""
