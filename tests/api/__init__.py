"""Tests of the control API against a real daemon."""
